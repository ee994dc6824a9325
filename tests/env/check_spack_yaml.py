#!/usr/bin/env python3
"""env/spack.yaml parses as a Spack environment (issue 29): a `spack:` mapping whose `specs` are
spec strings naming every library fnvlp's CMakeLists.txt finds, each as `name[@versions] [+/~/key=value
variants]`. Whether the names and variants exist in Spack is checked against Spack's package
recipes by hand (issue 29's notes): Spack itself is not installable here."""
import re
import sys

import yaml

path = sys.argv[1]
env = yaml.safe_load(open(path))
assert isinstance(env, dict) and set(env) == {"spack"}, f"{path}: top level must be 'spack:' only"
spack = env["spack"]
specs = spack.get("specs")
assert isinstance(specs, list) and specs, f"{path}: spack.specs must be a non-empty list"
token = re.compile(r"^(?:[+~][a-z0-9_]+|[a-z0-9_]+=[A-Za-z0-9_.,-]+)$")
names = []
for s in specs:
    assert isinstance(s, str), f"{path}: spec {s!r} is not a string"
    head, *variants = s.split()
    m = re.match(r"^([a-z0-9][a-z0-9-]*)(@[0-9][0-9A-Za-z.:,-]*)?$", head)
    assert m, f"{path}: '{head}' is not name[@versions]"
    bad = [v for v in variants if not token.match(v)]
    assert not bad, f"{path}: '{s}': {bad} are not +variant, ~variant or key=value"
    names.append(m.group(1))
assert len(set(names)) == len(names), f"{path}: a package listed twice: {names}"
# What CMakeLists.txt (find_package) and the scripts need, by Spack package name.
needed = {"cmake", "ninja", "openmpi", "hdf5", "kokkos", "py-torch", "nccl", "openblas",
          "yaml-cpp", "cxxopts", "nlohmann-json", "spdlog", "libjpeg-turbo", "libpng", "zlib",
          "openssl", "icu4c", "googletest", "lmod"}
missing = needed - set(names)
assert not missing, f"{path}: no spec for {sorted(missing)}"
assert "+mpi" in next(s for s in specs if s.startswith("hdf5")), "hdf5 must be +mpi (parallel HDF5)"
assert spack.get("concretizer", {}).get("unify") is True, "concretizer.unify must be true"
print(f"{path}: {len(specs)} specs, every needed package present: {' '.join(names)}")
