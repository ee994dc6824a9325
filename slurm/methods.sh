# shellcheck shell=bash
# Campaign method names: each is a config overlay jobs/configs/methods/NAME.yaml (the one place
# that defines the method's switches). uniform is the default configuration: no overrides.
# FNVLP_FN_ALPHA: the filtered fraction for GloFND and FNC (GloFND §3.1: alpha of the negatives
# above the per-anchor (1-alpha)-quantile are treated as false negatives).
# shellcheck disable=SC2034  # read by the scripts that source this file
FNVLP_METHODS=(uniform grit_q1 grit_q05 grit_q0 hardening softening fnc glofnd srcl tcl falcon
  falcon_glofnd glofnd_exact oracle)

# Prints one key=value per line for METHOD: its overlay jobs/configs/methods/METHOD.yaml (the
# same file `fnvlp-pretrain --config BASE --config OVERLAY` layers), flattened to --set keys, with
# negatives.alpha from FNVLP_FN_ALPHA where the method has one. Returns 1 for an unknown name.
fnvlp_method_overrides() {
  local overlay
  overlay="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/jobs/configs/methods/$1.yaml"
  [ -f "$overlay" ] || return 1
  /usr/bin/python3 - "$overlay" "${FNVLP_FN_ALPHA:-}" <<'PY'
import sys, yaml
def flat(prefix, node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from flat(f"{prefix}{k}.", v)
    else:
        yield prefix[:-1], node
doc = yaml.safe_load(open(sys.argv[1])) or {}
for key, value in flat("", doc):
    if key == "negatives.alpha" and sys.argv[2]:
        value = sys.argv[2]
    if isinstance(value, bool):
        value = str(value).lower()
    print(f"{key}={value}")
PY
}
