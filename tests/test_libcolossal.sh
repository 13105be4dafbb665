#!/bin/sh
# test_libcolossal.sh - the library make install ships holds every internal library: libcolossal.a has each
# member of each archive it is made of (LIBCOLOSSAL_ARCHIVES), as many times as they do, and libcolossal.so
# defines every C function those members define (not the CUDA kernels' C++ launch stubs). TAP output.
set -u
builddir=${BUILDDIR:-.}
: "${LIBCOLOSSAL_ARCHIVES:?}" "${LIBCOLOSSAL_SO:?}"
cd "$builddir" || exit 1
n=0
failed=0
ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/colossal-lib.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
for a in $LIBCOLOSSAL_ARCHIVES; do ar t "$a"; done | sort >"$tmp/want"
ar t libcolossal.a | sort >"$tmp/got"
cmp -s "$tmp/want" "$tmp/got"
ok $? "libcolossal.a holds the $(wc -l <"$tmp/want") members of $(echo $LIBCOLOSSAL_ARCHIVES | wc -w) archives ($(wc -l <"$tmp/got") members)"
comm -23 "$tmp/want" "$tmp/got" | sed 's/^/# missing: /'
nm --defined-only $LIBCOLOSSAL_ARCHIVES 2>/dev/null | awk '$2 == "T" && $3 !~ /^_Z/ {print $3}' | sort -u >"$tmp/fn_want"
nm -D --defined-only "$LIBCOLOSSAL_SO" | awk '$2 == "T" {print $3}' | sort -u >"$tmp/fn_got"
missing=$(comm -23 "$tmp/fn_want" "$tmp/fn_got" | wc -l)
test -s "$tmp/fn_want" && test "$missing" -eq 0
ok $? "$LIBCOLOSSAL_SO exports the $(wc -l <"$tmp/fn_want") C functions the archives define ($missing missing)"
comm -23 "$tmp/fn_want" "$tmp/fn_got" | head -n 10 | sed 's/^/# missing: /'
soname=$(readelf -d "$LIBCOLOSSAL_SO" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
test "$soname" = "${LIBCOLOSSAL_SONAME:-}"
ok $? "its soname is $soname"
echo "1..$n"
exit $failed
