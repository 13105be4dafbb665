#!/bin/sh
# test_installed.sh - libcolossal as its users get it, from the INSTALLED tree (run by `make installcheck`,
# hence by `make distcheck`): the files are there, every public header compiles on its own through
# `pkg-config --cflags colossal`, and tests/installed_api.c builds, links and runs against libcolossal.so
# (pkg-config --libs) and against libcolossal.a (pkg-config --static --libs). TAP output, non-zero on a failure.
# Environment (the Makefile sets it): PKG_CONFIG CC SRCDIR prefix libdir includedir, DESTDIR when staged.
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
SRCDIR=${SRCDIR:-.}
: "${libdir:?libdir is not set}" "${includedir:?includedir is not set}"
lib="${DESTDIR}${libdir}"
inc="${DESTDIR}${includedir}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/colossal-installed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0
failed=0
ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}

# pkg-config reads the installed colossal.pc; a staged install (DESTDIR) is its sysroot
PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
if [ -n "${DESTDIR}" ]; then PKG_CONFIG_SYSROOT_DIR=$DESTDIR; export PKG_CONFIG_SYSROOT_DIR; fi

test -f "$lib/libcolossal.a" && test -f "$lib/pkgconfig/colossal.pc"
ok $? "libcolossal.a and pkgconfig/colossal.pc are installed in $libdir"
soname=$(readelf -d "$lib/libcolossal.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
test -n "$soname" && test -L "$lib/libcolossal.so" && test -L "$lib/$soname" && test -f "$lib/$(readlink "$lib/$soname")"
ok $? "libcolossal.so -> $soname -> ${soname:+$(readlink "$lib/$soname")} (its soname)"

cflags=$($PKG_CONFIG --cflags colossal) && libs=$($PKG_CONFIG --libs colossal) &&
    slibs=$($PKG_CONFIG --static --libs colossal)
ok $? "pkg-config --cflags, --libs and --static --libs colossal: $libs"

# each public header on its own: everything it includes is installed beside it
bad=
count=0
for h in "$inc"/colossal/*.h; do
    count=$((count + 1))
    printf '#include <colossal/%s>\nint colossal_header_check;\n' "${h##*/}" >"$tmp/h.c"
    $CC -std=c11 $cflags -fsyntax-only -Wall -Werror "$tmp/h.c" 2>"$tmp/h.err" || { bad="$bad ${h##*/}"; cat "$tmp/h.err" | sed 's/^/# /'; }
done
test "$count" -gt 20 && test -z "$bad"
ok $? "the $count installed headers each compile alone from $includedir/colossal${bad:+ (not:$bad)}"

# the same program linked against the shared library, then against the static one
$CC -std=c11 -o "$tmp/api_shared" "$SRCDIR/tests/installed_api.c" $cflags $libs -lm 2>"$tmp/cc.err"
ok $? "installed_api.c links against libcolossal.so with pkg-config --libs"
sed 's/^/# /' "$tmp/cc.err"
readelf -d "$tmp/api_shared" 2>/dev/null | grep -q "NEEDED.*\[$soname\]"
ok $? "the program needs $soname"
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/api_shared" $((n + 1)) >"$tmp/run.out" 2>&1
rc=$?
cat "$tmp/run.out"
n=$((n + $(grep -c '^\(not \)\{0,1\}ok ' "$tmp/run.out")))
[ $rc -eq 0 ] || { ok 1 "installed_api (shared) exits 0 (it exited $rc)"; }

# static: libcolossal.a by name (with the .so beside it, -lcolossal would take the .so)
slibs=$(echo "$slibs" | sed 's/-lcolossal\b/-l:libcolossal.a/')
$CC -std=c11 -o "$tmp/api_static" "$SRCDIR/tests/installed_api.c" $cflags $slibs -lm 2>"$tmp/cc.err"
ok $? "installed_api.c links against libcolossal.a with pkg-config --static --libs"
sed 's/^/# /' "$tmp/cc.err"
! readelf -d "$tmp/api_static" 2>/dev/null | grep -q 'NEEDED.*libcolossal'
ok $? "the static program needs no libcolossal.so"
"$tmp/api_static" $((n + 1)) >"$tmp/run.out" 2>&1
rc=$?
cat "$tmp/run.out"
n=$((n + $(grep -c '^\(not \)\{0,1\}ok ' "$tmp/run.out")))
[ $rc -eq 0 ] || { ok 1 "installed_api (static) exits 0 (it exited $rc)"; }
echo "1..$n"
exit $failed
