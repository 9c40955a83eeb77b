#!/bin/bash
# release-package.sh COMMIT OUT — the .deb of an earlier commit, built as
# that commit's own Makefile builds it (`make package`), written to OUT.
# The package test upgrades from it: a real earlier release, with its own
# daemon, frp, bundle and maintainer scripts, not this tree dressed up.
#
# A commit never changes, so its package is kept in
# ${XDG_CACHE_HOME:-~/.cache}/tunnelsvc/packages/<commit>.deb and built only
# once per machine (about a minute on 2 processors).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! commit=$(git rev-parse --verify --quiet "$1^{commit}"); then
	echo "release-package: commit $1 is not in this clone (a shallow clone? git fetch --unshallow brings it)" >&2
	exit 1
fi
out=$2
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tunnelsvc/packages
if [ -s "$cache/$commit.deb" ]; then
	cp "$cache/$commit.deb" "$out"
	exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
src=$work/src
cleanup() {
	git worktree remove --force "$src" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
echo "release-package: building the package of $(git log -1 --format='%h (%cs) %s' "$commit")" >&2
git worktree add --quiet --detach "$src" "$commit"
# The UI's npm packages: this tree's, when that commit locks the same ones
# (npm ci otherwise, as its Makefile does).
if [ -d ui/node_modules ] && cmp -s ui/package-lock.json "$src/ui/package-lock.json"; then
	cp -a ui/node_modules "$src/ui/node_modules"
fi
if ! log=$(make -C "$src" --no-print-directory package 2>&1); then
	printf '%s\n' "$log" | tail -n 30 >&2
	echo "release-package: make package failed at $commit" >&2
	exit 1
fi
deb=$(ls "$src"/dist/*.deb)
cp "$deb" "$cache/$commit.deb.tmp"
mv "$cache/$commit.deb.tmp" "$cache/$commit.deb"
cp "$cache/$commit.deb" "$out"
