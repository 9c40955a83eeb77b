#!/bin/sh
# pkg-version.sh — the version of the packages built from this checkout. It
# must start with a digit and always increase, since dpkg and rpm order
# versions: the tag without its "v" on a tagged commit; after a tag, the tag
# plus "+git<commits since the tag>.<hash>"; with no tag yet,
# "0.1.0+git<commits>.<hash>". dpkg and rpm compare the digit runs as
# numbers, so the commit count orders two builds; the hash only names them.
set -eu
# Not a git checkout (a source tarball): the base version.
hash=$(git rev-parse --short=12 HEAD 2>/dev/null) || { echo 0.1.0; exit 0; }
if tag=$(git describe --tags --exact-match 2>/dev/null); then
  echo "${tag#v}"
elif tag=$(git describe --tags --abbrev=0 2>/dev/null); then
  echo "${tag#v}+git$(git rev-list --count "$tag..HEAD").$hash"
else
  echo "0.1.0+git$(git rev-list --count HEAD).$hash"
fi
