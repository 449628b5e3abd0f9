#!/usr/bin/env python3
"""The dependency rule of fivefold, checked: modules point down only.

The module order and each module's dependencies are read from
CMakeLists.txt (FIVEFOLD_MODULES, bottom first, and FIVEFOLD_DEPS_<mod>).
Fails (exit 1, one line per problem) when
  * a module depends on a module that is not below it in FIVEFOLD_MODULES
    (a back-arrow or a cycle),
  * a source file under src/<mod>/ includes "other/..." where other is
    neither mod nor one of the modules it links (directly or through its
    dependencies),
  * plan links MPI (it must run on a laptop: only comm's MPI-free grid math).
src/cli/ is the top: it may include every module.

  --inject FILE:HEADER  pretend FILE (under src/) also includes HEADER, to
                        prove that the check catches a back-arrow;
  --expect-caught       with --inject: exit 0 exactly when every injected
                        include is reported (the check's own test).
"""
import argparse
import os
import re
import sys


def read_cmake(root):
    text = open(os.path.join(root, "CMakeLists.txt")).read()
    m = re.search(r"^set\(FIVEFOLD_MODULES ([^)]*)\)", text, re.M)
    if not m:
        sys.exit("check-deps: CMakeLists.txt has no set(FIVEFOLD_MODULES ...)")
    modules = m.group(1).split()
    deps = {}
    for mod in modules:
        d = re.search(r"^set\(FIVEFOLD_DEPS_%s(?:\s+([^)]*))?\)" % re.escape(mod), text, re.M)
        if not d:
            sys.exit("check-deps: CMakeLists.txt has no set(FIVEFOLD_DEPS_%s ...)" % mod)
        deps[mod] = (d.group(1) or "").replace('""', "").split()
    return modules, deps


def module_of(lib):
    """fivefold_comm_grid is comm's MPI-free part; other targets are not modules."""
    if lib == "fivefold_comm_grid":
        return "comm_grid"
    if lib.startswith("fivefold_"):
        return lib[len("fivefold_"):]
    return None


def closure(mod, deps, seen=None):
    seen = set() if seen is None else seen
    for lib in deps.get(mod, []):
        dep = module_of(lib)
        if dep and dep not in seen:
            seen.add(dep)
            closure(dep, deps, seen)
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--inject", action="append", default=[], metavar="FILE:HEADER")
    ap.add_argument("--expect-caught", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    modules, deps = read_cmake(root)
    rank = {m: i for i, m in enumerate(modules)}
    problems = []

    for mod in modules:
        for lib in deps[mod]:
            dep = module_of(lib)
            if dep is None or dep == "comm_grid":
                continue
            if dep not in rank:
                problems.append("CMakeLists.txt: FIVEFOLD_DEPS_%s names %s, which is not a module" % (mod, lib))
            elif rank[dep] >= rank[mod]:
                problems.append("CMakeLists.txt: %s depends on %s, which is not below it in FIVEFOLD_MODULES "
                                "(a back-arrow)" % (mod, dep))
    plan_mods = closure("plan", deps) | {"plan"}
    mpi_via = sorted(m for m in plan_mods if m == "comm" or any("MPI" in lib for lib in deps.get(m, [])))
    if mpi_via:
        problems.append("CMakeLists.txt: plan links MPI (through %s); it may use only fivefold_comm_grid" %
                        ", ".join(mpi_via))

    injected = {}
    for spec in args.inject:
        path, _, header = spec.partition(":")
        injected.setdefault(path, []).append(header)

    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
    src = os.path.join(root, "src")
    for mod in sorted(os.listdir(src)):
        mod_dir = os.path.join(src, mod)
        if not os.path.isdir(mod_dir):
            continue
        if mod != "cli" and mod not in rank:
            problems.append("src/%s/: not a module in CMakeLists.txt's FIVEFOLD_MODULES" % mod)
            continue
        allowed = None if mod == "cli" else closure(mod, deps) | {mod}
        for name in sorted(os.listdir(mod_dir)):
            if not name.endswith((".c", ".h")):
                continue
            rel = "%s/%s" % (mod, name)
            text = open(os.path.join(mod_dir, name), errors="replace").read()
            found = [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in include.finditer(text)]
            found += [(0, h.split("/")[0], h.split("/", 1)[1]) for h in injected.get(rel, [])]
            for line, target, header in found:
                if allowed is None or target in allowed:
                    continue
                if target == "comm" and header == "grid_math.h" and "comm_grid" in allowed:
                    continue
                where = "src/%s:%s" % (rel, line) if line else "src/%s (injected)" % rel
                if target in rank and rank[target] > rank[mod]:
                    why = "%s is above %s (a back-arrow)" % (target, mod)
                else:
                    why = "%s does not depend on %s (FIVEFOLD_DEPS_%s: %s)" % (
                        mod, target, mod, " ".join(deps[mod]) or "none")
                problems.append('%s: #include "%s/%s": %s' % (where, target, header, why))

    for p in problems:
        print(p)
    if args.expect_caught:
        missed = [spec for spec in args.inject if not any(
            p.startswith("src/%s (injected)" % spec.split(":")[0]) and spec.split(":")[1] in p for p in problems)]
        for spec in missed:
            print("check-deps: the injected include %s was not reported" % spec)
        return 1 if missed or not args.inject else 0
    if problems:
        print("check-deps: %d problem(s); dependencies must point down (docs/architecture.md)" % len(problems))
        return 1
    print("check-deps: %d modules, every include points down" % len(modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
