#!/usr/bin/env bash
# copyright.sh HEADER BINARY... — prints /usr/share/doc/tunnelsvc/copyright:
# HEADER (our own notice, machine-readable format), then, for every Go
# module compiled into the given binaries (as `go version -m` lists them;
# the Go standard library included), the module's own licence text from the
# module cache. A module without a licence file there fails the build, so a
# package never ships code whose notice it lacks.
set -euo pipefail
header=$1; shift
modcache=$(go env GOMODCACHE)
goroot=$(go env GOROOT)

# Module paths are stored case-encoded in the cache: "A" becomes "!a".
escape() { sed -E 's/([A-Z])/!\L\1/g' <<<"$1"; }

declare -A used_by=()
for bin in "$@"; do
  name=$(basename "$bin")
  # "mod"/"dep" lines; a "=>" line replaces the module on the line before.
  while IFS=$'\t' read -r _ kind path version _; do
    case $kind in
      mod | dep) last="$path@$version" ;;
      "=>")
        unset "used_by[$last]"
        # A directory of this repository (third_party/): its licence is
        # there, under the path of the module it replaces. The path is
        # relative to the module that built the binary (tools/frp for the
        # engines), so the copy is found by the module its go.mod declares.
        case $path in
          ./* | ../* | /*)
            mod=${last%@*}
            copy=$(grep -lx "module $mod" third_party/*/go.mod 2>/dev/null | head -n1)
            [ -n "$copy" ] || { echo "copyright.sh: $mod is replaced by $path, which is no copy in third_party/" >&2; exit 1; }
            last="$mod@dir:./$(dirname "$copy")"
            ;;
          *) last="$path@$version" ;;
        esac
        ;;
      *) continue ;;
    esac
    used_by[$last]="${used_by[$last]:-} $name"
  done < <(go version -m "$bin" | sed 's/^\t//' | awk -F'\t' '{print "x\t" $0}')
done

cat "$header"
printf '\nFiles: (the Go standard library and runtime, compiled into every binary)\nCopyright: The Go Authors\nLicense: BSD-3-Clause\n'
sed -e 's/^$/./' -e 's/^/ /' "$goroot/LICENSE"
for mod in $(printf '%s\n' "${!used_by[@]}" | sort); do
  path=${mod%@*} version=${mod#*@}
  # Our own module: the header above.
  [ "$version" != "(devel)" ] || continue
  dir="$modcache/$(escape "$path")@$version"
  case $version in dir:*)
    dir=${version#dir:}
    version="(patched copy in ${dir#./})"
    ;;
  esac
  lic=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICEN[CS]E*' -o -iname 'COPYING*' -o -iname 'NOTICE*' \) 2>/dev/null | sort)
  [ -n "$lic" ] || { echo "copyright.sh: no licence file for $mod in $dir" >&2; exit 1; }
  printf '\nFiles: (compiled into:%s)\nComment: Go module %s %s\nLicense: see below\n' "${used_by[$mod]}" "$path" "$version"
  for f in $lic; do
    printf ' .\n ---- %s ----\n' "$(basename "$f")"
    sed -e 's/^[[:space:]]*$/./' -e 's/^/ /' "$f"
  done
done
