# The dependency rule (docs/architecture.md): every #include "mod/..." under
# src/ and every FIVEFOLD_DEPS_<mod> list points down. The second test
# injects back-arrows (base including the trainer, model including the
# checkpoints) and passes only when the check reports both, so the check
# is known to be able to fail.
add_test(NAME deps.check COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/check-deps.py --root ${CMAKE_SOURCE_DIR})
add_test(NAME deps.check_catches_back_arrow
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/check-deps.py --root ${CMAKE_SOURCE_DIR}
                 --inject base/error.c:train/trainer.h --inject model/model.c:ckpt/checkpoint.h --expect-caught)
