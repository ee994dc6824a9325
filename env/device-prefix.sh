#!/usr/bin/env bash
# Packs the Debian shared libraries that fnvlp binaries and Open MPI need into a relocatable prefix
# for the lent GPU machines, which have PyTorch/CUDA and glibc but none of our Debian packages and
# no network. Usage: env/device-prefix.sh OUTDIR BINARY...
# Writes OUTDIR/prefix.tar.xz (with activate.sh at its root) and OUTDIR/activate.sh; there:
#   mkdir -p D && tar -xJf prefix.tar.xz -C D && . D/activate.sh D
# The .debs are cached in ${FNVLP_DEB_CACHE:-~/.cache/fnvlp/debs}, so reruns need no network.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUTDIR BINARY..." >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
cache=${FNVLP_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/debs}
# Staging outside OUTDIR: OUTDIR may be carried to the device, whose transfer limit is 64 MiB.
stage=$(mktemp -d "${TMPDIR:-/tmp}/device-prefix.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$cache"
lib=/usr/lib/x86_64-linux-gnu
# The GPU machine brings its own glibc and C++ runtime (ours must not shadow them) ...
excl_pkg='^(libc6|libstdc\+\+6|libgcc-s1)$'
# ... and its PyTorch wheel brings torch, CUDA, NCCL, cuDNN (from the venv, torch/lib, nvidia/).
excl_name='^(libtorch|libc10|libcaffe2|libshm|libcu(da|dart|blas|fft|rand|sparse|solver|pti|file|dnn)|libnccl|libnv(rtc|JitLink|ToolsExt|shmem|perf)|libgomp-)'
excl_path='(/site-packages/|/dist-packages/|/venv/|/\.venv/|/torch/lib/|/nvidia/)'
# Interconnect plugins a single-node machine cannot use; Debian's openmpi-mca-params.conf already
# disables them, and they would drag in libfabric, UCX, PSM and ibverbs. FNVLP_PREFIX_PRUNE= keeps all.
prune=${FNVLP_PREFIX_PRUNE-'.*/(lib)?mca_[a-z]+_(ofi|ucx|uct|psm|psm2|openib|verbs)\.so.*'}

declare -A owner=() pkgs=() fetched=() walked=() links=()
pairs() { ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' || true; }
add() { # SONAME PATH: records the package (and soname link) of one resolved library
  local n=$1 p=$2 r
  # Skip excluded libraries and those found inside the prefix itself (via $ORIGIN runpaths).
  [[ $n =~ $excl_name || $p =~ $excl_path || $p == "$stage"/* ]] && return 0
  r=$(readlink -f "$p")
  if [ -z "${owner[$r]+x}" ]; then
    # usrmerge: some packages list /lib/..., others /usr/lib/...
    owner[$r]=$({ dpkg -S "$r" || dpkg -S "${r#/usr}"; } 2>/dev/null | head -n 1 | sed 's/[:,].*//' || true)
    [ -n "${owner[$r]}" ] || echo "device-prefix: warning: no package owns $r ($n)" >&2
  fi
  [ -n "${owner[$r]}" ] || return 0
  [[ ${owner[$r]} =~ $excl_pkg ]] && return 0
  pkgs[${owner[$r]}]=1
  links[$n]=$r # soname -> real file: recreates alternatives such as libblas.so.3 -> OpenBLAS
}
fetch() { # PKG: the installed version's .deb (else the archive's, same soname), cached, unpacked
  local p=$1 v deb dl=(apt-get -qq -o APT::Sandbox::User=root download)
  v=$(dpkg-query -W -f='${Version}' "$p")
  deb=$(compgen -G "$cache/${p}_${v//:/%3a}_*.deb" | head -n 1 || true)
  if [ -z "$deb" ] && deb=$(compgen -G "/var/cache/apt/archives/${p}_${v//:/%3a}_*.deb"); then
    cp "$deb" "$cache/" && deb=$cache/${deb##*/}
  elif [ -z "$deb" ]; then
    (cd "$cache" && { "${dl[@]}" "$p=$v" 2>/dev/null || "${dl[@]}" "$p" 2>/dev/null ||
      { apt-get -qq update && "${dl[@]}" "$p"; }; })
    deb=$(compgen -G "$cache/${p}_*.deb" | sort -V | tail -n 1)
  fi
  dpkg -x "$deb" "$stage"
}

# The binaries: only their direct NEEDED entries, so torch's own dependency tree stays out.
for b in "$@"; do
  needed=" $(readelf -d "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ') "
  while read -r n p; do [[ $needed == *" $n "* ]] && add "$n" "$p"; done < <(pairs "$b")
done
# Open MPI's launcher, help files, MCA plugins and PMIx (dlopened, so no binary NEEDs them).
for p in openmpi-bin openmpi-common libopenmpi3 libpmix2 libopenblas0-pthread; do pkgs[$p]=1; done

# Fixpoint: unpack new packages, prune, then walk every ELF file they brought (ldd is transitive).
while :; do
  new=0
  for p in "${!pkgs[@]}"; do [ -n "${fetched[$p]:-}" ] && continue; fetched[$p]=1; new=1; fetch "$p"; done
  [ "$new" = 1 ] || break
  rm -rf "$stage"/usr/share/{doc,man,info,locale,lintian,bug,doc-base,bash-completion} \
    "$stage"/usr/include "$stage$lib"/{openmpi,pmix2}/include "$stage$lib"/{,openmpi/lib/}pkgconfig
  find "$stage" \( -name '*.a' -o -name '*.la' \) -delete
  [ -z "$prune" ] || find "$stage" -regextype egrep -regex "$prune" -delete
  while IFS= read -r f; do
    [ -n "${walked[$f]:-}" ] && continue; walked[$f]=1
    while read -r n p; do add "$n" "$p"; done < <(pairs "$f")
  done < <(find "$stage" -type f \( -name '*.so*' -o -perm -u+x \))
done

# usrmerge: fold lib/ into usr/lib/, then add the soname links Debian's alternatives provide.
if [ -d "$stage/lib" ]; then cp -a "$stage/lib/." "$stage/usr/lib/" && rm -rf "${stage:?}/lib"; fi
for n in "${!links[@]}"; do
  [ -e "$stage$lib/$n" ] || ln -s "$(realpath -m --relative-to="$lib" "${links[$n]}")" "$stage$lib/$n"
  [ -e "$stage$lib/$n" ] || echo "device-prefix: warning: $n -> ${links[$n]} missing from prefix" >&2
done
ln -sf mpirun.openmpi "$stage/usr/bin/mpirun" && ln -sf mpiexec.openmpi "$stage/usr/bin/mpiexec"

# activate.sh: relative to the extraction dir; Open MPI and PMIx find components, help files
# and their params files through these variables when not installed at /usr.
cat > "$stage/activate.sh" <<'EOF'
# shellcheck shell=bash
# Source after extracting prefix.tar.xz into DIR: . DIR/activate.sh [DIR]
if [ -n "${1:-}" ] && [ -d "$1/usr/lib/x86_64-linux-gnu/openmpi" ]; then _fp=$(cd "$1" && pwd)
else _fp=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); fi
_fl=$_fp/usr/lib/x86_64-linux-gnu
[ -d "$_fl/openmpi" ] || echo "activate.sh: no prefix under $_fp; pass the extraction dir" >&2
export PATH=$_fp/usr/bin${PATH:+:$PATH}
# openblas-pthread: Debian's libblas.so.3/liblapack.so.3 alternatives (OpenBLAS) live there.
export LD_LIBRARY_PATH=$_fl:$_fl/openblas-pthread:$_fl/openmpi/lib:$_fl/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$_fp/usr OPAL_SYSCONFDIR=$_fp/etc/openmpi
export OPAL_LIBDIR=$_fl/openmpi/lib OPAL_PKGLIBDIR=$_fl/openmpi/lib/openmpi3
export OPAL_DATADIR=$_fp/usr/share OPAL_PKGDATADIR=$_fp/usr/share/openmpi
export PMIX_PREFIX=$_fl/pmix2 PMIX_LIBDIR=$_fl/pmix2/lib PMIX_PKGLIBDIR=$_fl/pmix2/lib/pmix
export PMIX_DATADIR=$_fl/pmix2/share PMIX_PKGDATADIR=$_fl/pmix2/share/pmix PMIX_SYSCONFDIR=$_fl/pmix2/share
export PMIX_MCA_mca_base_component_path=$_fl/pmix2/lib/pmix
unset _fp _fl
EOF
cp "$stage/activate.sh" "$out/activate.sh"

XZ_OPT="-9 -T${FNVLP_JOBS:-2}" tar -C "$stage" --owner=0 --group=0 -cJf "$out/prefix.tar.xz" .
echo "device-prefix: packages: $(printf '%s\n' "${!pkgs[@]}" | sort | tr '\n' ' ')"
# The device's own glibc and libstdc++ must be at least this new.
echo "device-prefix: unpacked $(du -sh "$stage" | cut -f1), needs" \
  "$(grep -raoh 'GLIBC_2\.[0-9]*\|GLIBCXX_3\.4\.[0-9]*' "$stage" | sort -uV |
    awk -F_ '{m[$1]=$0} END{print m["GLIBC"], m["GLIBCXX"]}')"
echo "device-prefix: $out/prefix.tar.xz $(du -h "$out/prefix.tar.xz" | cut -f1)"
