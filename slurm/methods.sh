# shellcheck shell=bash
# The one place that maps a campaign method name to fnvlp-pretrain --set overrides (the switches
# of the false-negative methods, issue 4). uniform is the default configuration: no overrides.
# FNVLP_FN_ALPHA: the filtered fraction for GloFND and FNC (GloFND §3.1: alpha of the negatives
# above the per-anchor (1-alpha)-quantile are treated as false negatives).
# shellcheck disable=SC2034  # read by the scripts that source this file
FNVLP_METHODS=(uniform grit_q1 grit_q05 grit_q0 hardening softening fnc glofnd srcl tcl falcon
  falcon_glofnd)

# Prints one key=value per line for METHOD; returns 1 for an unknown name.
fnvlp_method_overrides() {
  local a=${FNVLP_FN_ALPHA:-0.01}
  case "$1" in
    uniform) ;;
    grit_q1) printf '%s\n' sampler.kind=grit sampler.q=1 sampler.schedule=fixed ;;
    grit_q05) printf '%s\n' sampler.kind=grit sampler.q=0.5 sampler.schedule=fixed ;;
    grit_q0) printf '%s\n' sampler.kind=grit sampler.q=0 sampler.schedule=fixed ;;
    hardening) printf '%s\n' sampler.kind=grit sampler.schedule=hardening ;;
    softening) printf '%s\n' sampler.kind=grit sampler.schedule=softening ;;
    fnc) printf '%s\n' negatives.method=fnc "negatives.alpha=$a" ;;
    glofnd) printf '%s\n' negatives.method=glofnd "negatives.alpha=$a" ;;
    srcl) printf '%s\n' negatives.method=srcl ;;
    tcl) printf '%s\n' loss.tcl=true ;;
    falcon) printf '%s\n' sampler.kind=falcon ;;
    falcon_glofnd) printf '%s\n' sampler.kind=falcon negatives.method=glofnd "negatives.alpha=$a" ;;
    *) return 1 ;;
  esac
}
