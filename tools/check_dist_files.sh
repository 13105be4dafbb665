#!/bin/sh
# check_dist_files.sh SRCDIR DISTDIR - every file git tracks in SRCDIR is in the distribution DISTDIR (the
# unpacked tarball): lists what is missing (add it to EXTRA_DIST in Makefile.am) and exits 1 if anything is.
# `make distcheck` runs it (distcheck-hook); outside a git checkout it says so and passes.
# Not distributed on purpose: .gitignore (git's, meaningless in a tarball).
src=${1:?usage: check_dist_files.sh SRCDIR DISTDIR}
dist=${2:?usage: check_dist_files.sh SRCDIR DISTDIR}
if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "check_dist_files: $src is not a git checkout: the tarball's contents are not checked"
    exit 0
fi
missing=$(git -C "$src" ls-files | while IFS= read -r f; do
    case "$f" in .gitignore) continue ;; esac
    [ -e "$dist/$f" ] || echo "$f"
done)
if [ -n "$missing" ]; then
    echo "check_dist_files: tracked by git but not in $dist (add them to EXTRA_DIST):"
    echo "$missing" | sed 's/^/  /'
    exit 1
fi
echo "check_dist_files: all $(git -C "$src" ls-files | grep -cv '^\.gitignore$') tracked files are in the distribution"
