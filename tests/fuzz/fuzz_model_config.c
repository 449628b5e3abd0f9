/* Fuzz harness of the model config reader (src/model/config.h).
 *
 * Each input is a would-be config.json. It goes through both entry points:
 * cJSON then model_config_from_json, and model_config_load on a file with
 * the same bytes; the two must agree. An accepted config must also pass
 * model_config_validate and survive the canonical round trip the header
 * promises (model_config_to_json, printed, parsed, read back: the same
 * ModelConfig), since checkpoints store configs in that form. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <cjson/cJSON.h>

#include "model/config.h"

/* The canonical form, as text, must read back to exactly cfg. */
static void check_round_trip(const ModelConfig *cfg) {
  cJSON *j = model_config_to_json(cfg);
  if (!j) fuzz_fail("model_config_to_json", "returned NULL");
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!text) fuzz_fail("cJSON_PrintUnformatted", "returned NULL");
  cJSON *back = cJSON_Parse(text);
  if (!back) fuzz_fail("canonical model config", text);
  ModelConfig again;
  Error err;
  fuzz_error_reset(&err);
  int rc = model_config_from_json(&again, back, "canonical.json", &err);
  cJSON_Delete(back);
  if (rc) {
    fprintf(stderr, "canonical form: %s\nerror: %s\n", text, err.msg);
    fuzz_fail("the canonical form of an accepted config", "is refused");
  }
  if (memcmp(&again, cfg, sizeof again) != 0) {
    fprintf(stderr, "canonical form: %s\n", text);
    fuzz_fail("the canonical form of an accepted config", "reads back as a different config");
  }
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* cJSON gets a terminated copy: the reader's behaviour is under test, not
   * cJSON's handling of unterminated buffers. */
  char *text = fuzz_cstring(data, size);
  cJSON *root = cJSON_ParseWithLength(text, size);
  free(text);

  ModelConfig from_json, loaded;
  Error err;
  int rc_json = -1;
  if (root) {
    fuzz_error_reset(&err);
    rc_json = model_config_from_json(&from_json, root, "fuzz/config.json", &err);
    fuzz_check_result(rc_json, &err, "model_config_from_json");
    cJSON_Delete(root);
  }

  fuzz_error_reset(&err);
  int rc_load = model_config_load(&loaded, fuzz_input_path(data, size), &err);
  fuzz_check_result(rc_load, &err, "model_config_load");

  if (!root && rc_load == 0) fuzz_fail("model_config_load", "accepted bytes cJSON does not parse");
  if (root && (rc_json == 0) != (rc_load == 0))
    fuzz_fail("model_config_load and model_config_from_json", "disagree on the same bytes");
  if (rc_load != 0) return 0;
  if (memcmp(&from_json, &loaded, sizeof loaded) != 0)
    fuzz_fail("model_config_load and model_config_from_json", "read different configs from the same bytes");

  fuzz_error_reset(&err);
  int rc = model_config_validate(&loaded, "fuzz/config.json", &err);
  fuzz_check_result(rc, &err, "model_config_validate");
  if (rc) fuzz_fail("model_config_validate", "refuses a config model_config_load accepted");
  int moe = model_config_num_moe_layers(&loaded);
  if (moe < 0 || moe > loaded.num_layers) fuzz_fail("model_config_num_moe_layers", "out of range");
  if (model_config_head_dim(&loaded) < 2 || model_config_kv_heads(&loaded) < 1)
    fuzz_fail("an accepted config", "has no usable head_dim / num_kv_heads");
  check_round_trip(&loaded);
  return 0;
}
