#!/usr/bin/env python3
"""Writes libcore/text/tok_unicode_data.c: the Unicode tables of the tokenizer's
NFC and Lowercase normalizers (tok_unicode.c), taken from what Hugging Face
tokenizers itself does, so that colossal normalizes exactly as it does.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_unicode_tables.py

tokenizers 0.23 does not use one Unicode version: its NFC comes from the crate
unicode-normalization-alignments (old Unicode data: about version 9 for the
combining classes), its Lowercase from Rust's char::to_lowercase (Unicode 16).
So the tables are probed from the library, code point by code point:
  decompositions  every code point that tokenizers' NFD changes; its one-level
                  canonical mapping is Python's unicodedata (Unicode 14), kept
                  only if expanding it gives tokenizers' NFD exactly
  combining class Python's value for marks that tokenizers reorders (a mark
                  the crate does not know is never reordered: class 0); each
                  value is checked against one reference mark of every class
  compositions    the two-character mappings whose pair tokenizers' NFC
                  composes back (composition exclusions and non-starter
                  decompositions fail that test)
  lowercase       tokenizers' Lowercase of each code point alone (it maps
                  characters one by one: no final-sigma rule); all map to one
                  code point except U+0130, which tok_unicode.c handles
Then the tables are checked by running the C algorithm's steps in Python on
every single code point and on random mark sequences against tokenizers' NFC.
Hangul syllables are composed and decomposed by arithmetic, not tables.
"""
import random
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers

OUT = "libcore/text/tok_unicode_data.c"
NFD, NFC, LOWER = normalizers.NFD(), normalizers.NFC(), normalizers.Lowercase()
SB, SCOUNT = 0xAC00, 11172
CPS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]


def is_hangul(c):
    return SB <= c < SB + SCOUNT


def swaps(x, y):
    """tokenizers' NFD puts y before x: both are marks and class(x) > class(y)"""
    return NFD.normalize_str(chr(x) + chr(y)) == chr(y) + chr(x)


def combining_classes():
    marks = [c for c in CPS if unicodedata.combining(chr(c)) and NFD.normalize_str(chr(c)) == chr(c)]
    # a mark tokenizers knows is reordered against U+0345 (class 240) or U+0334 (class 1)
    known = [c for c in marks if swaps(0x345, c) or swaps(c, 0x334)]
    refs = {}
    for c in known:
        refs.setdefault(unicodedata.combining(chr(c)), c)
    ccc = {}
    for c in known:
        p = unicodedata.combining(chr(c))
        for v, r in refs.items():
            if r != c and (swaps(c, r) != (p > v) or swaps(r, c) != (v > p)):
                sys.exit(f"U+{c:04X}: tokenizers orders it against U+{r:04X} unlike class {p} vs {v}")
        ccc[c] = p
    others = [c for c in CPS if c not in ccc and (swaps(0x345, c) or swaps(c, 0x334))]
    if others:
        sys.exit(f"tokenizers reorders code points Python gives class 0: {[hex(c) for c in others[:10]]}")
    return ccc


def reorder(seq, ccc):
    """canonical ordering: stable sort of each run of non-starters by class"""
    out, i = list(seq), 0
    while i < len(out):
        if ccc.get(out[i], 0) == 0:
            i += 1
            continue
        j = i
        while j < len(out) and ccc.get(out[j], 0):
            j += 1
        out[i:j] = sorted(out[i:j], key=lambda c: ccc[c])
        i = j
    return out


def decompositions(ccc):
    dec = {}
    for c in CPS:
        if is_hangul(c) or NFD.normalize_str(chr(c)) == chr(c):
            continue
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            sys.exit(f"U+{c:04X}: tokenizers decomposes it, Python has no canonical mapping")
        dec[c] = [int(x, 16) for x in d.split()]
    for c in dec:
        if [ord(x) for x in NFD.normalize_str(chr(c))] != full_decomposition(c, dec, ccc):
            sys.exit(f"U+{c:04X}: the expanded mapping differs from tokenizers' NFD")
    return dec


def full_decomposition(c, dec, ccc):
    def expand(x):
        if is_hangul(x):
            s = x - SB
            lv = [0x1100 + s // 588, 0x1161 + s % 588 // 28]
            return lv + ([0x11A7 + s % 28] if s % 28 else [])
        return [y for m in dec[x] for y in expand(m)] if x in dec else [x]
    return reorder(expand(c), ccc)


def compositions(dec):
    comp = {}
    for c, m in dec.items():
        if len(m) == 2 and NFC.normalize_str(chr(m[0]) + chr(m[1])) == chr(c):
            comp[(m[0], m[1])] = c
    return comp


def nfc(text, dec, ccc, comp):
    """the algorithm of tok_unicode.c, in Python, on the generated tables"""
    d = []
    for ch in text:
        d += full_decomposition(ord(ch), dec, ccc)
    d = reorder(d, ccc)
    out, starter, last_ccc = [], -1, 0
    for c in d:
        k = ccc.get(c, 0)
        if starter >= 0 and (last_ccc < k or (last_ccc == 0 and len(out) - 1 == starter)):
            s = out[starter]
            if 0x1100 <= s < 0x1113 and 0x1161 <= c < 0x1176:
                out[starter] = SB + ((s - 0x1100) * 21 + c - 0x1161) * 28
                continue
            if is_hangul(s) and (s - SB) % 28 == 0 and 0x11A7 < c < 0x11C3:
                out[starter] = s + c - 0x11A7
                continue
            if (s, c) in comp:
                out[starter] = comp[(s, c)]
                continue
        if k == 0:
            starter = len(out)
        last_ccc = k
        out.append(c)
    return "".join(map(chr, out))


def lowercase():
    low = {}
    for c in CPS:
        s = LOWER.normalize_str(chr(c))
        if s != chr(c):
            if len(s) != 1 and c != 0x130:
                sys.exit(f"U+{c:04X} lowercases to {len(s)} characters")
            low[c] = ord(s[0]) if len(s) == 1 else None
    if LOWER.normalize_str("\u0130") != "i\u0307" or LOWER.normalize_str("A\u03a3") != "a\u03c3":
        sys.exit("Lowercase changed: U+0130 or the final sigma")
    return low


def ranges_of(pairs):
    """sorted (cp, value) -> [start, end, value, step] runs: cp = start, start+step, ..., end"""
    out = []
    for cp, v in pairs:
        if out:
            s, e, val, step = out[-1]
            if val == v and (e == s or cp - e == step) and cp - e in (1, 2):
                out[-1] = [s, cp, val, cp - e]
                continue
        out.append([cp, cp, v, 1])
    return out


def check(dec, ccc, comp):
    for c in CPS:
        if nfc(chr(c), dec, ccc, comp) != NFC.normalize_str(chr(c)):
            sys.exit(f"U+{c:04X}: the table NFC differs from tokenizers'")
    rng = random.Random(7)
    marks = sorted(ccc) + [0x334, 0x301, 0x345, 0x3099]
    bases = sorted({m[0] for m in comp} | set(dec)) + [0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x41, 0x20]
    for _ in range(100000):
        s = "".join(chr(rng.choice(bases if rng.random() < 0.4 else marks)) for _ in range(rng.randint(1, 6)))
        if nfc(s, dec, ccc, comp) != NFC.normalize_str(s):
            sys.exit(f"{[hex(ord(x)) for x in s]}: the table NFC differs from tokenizers'")


def rows(items, per):
    return "\n".join("    " + " ".join(items[i:i + per]) for i in range(0, len(items), per))


def main():
    ccc = combining_classes()
    dec = decompositions(ccc)
    comp = compositions(dec)
    low = lowercase()
    check(dec, ccc, comp)
    dec_items = sorted(dec.items())
    index = {c: i for i, (c, _) in enumerate(dec_items)}
    comp_idx = [index[c] for _, c in sorted(comp.items())]
    ccc_runs = []
    for c in sorted(ccc):
        if ccc_runs and ccc_runs[-1][1] == c - 1 and ccc_runs[-1][2] == ccc[c]:
            ccc_runs[-1][1] = c
        else:
            ccc_runs.append([c, c, ccc[c]])
    low_runs = ranges_of([(c, v - c) for c, v in sorted(low.items()) if v is not None])
    for s, e, delta, step in low_runs:
        assert -0x10FFFF <= delta <= 0x10FFFF and step in (1, 2)
    src = f"""/* tok_unicode_data.c - the tables of tok_unicode.c (NFC, Lowercase), generated by
 * tools/refgen/make_unicode_tables.py from what Hugging Face tokenizers {tokenizers.__version__}
 * does (its NFC: combining classes of about Unicode 9; its Lowercase: Unicode 16).
 * Do not edit: rerun the script. */
#include "tok_unicode.h"

/* canonical one-level decompositions, by code point: {{cp, first, second or 0}} */
const uint32_t col_uni_decomp[][3] = {{
{rows([f"{{0x{c:X},0x{m[0]:X},0x{m[1] if len(m) > 1 else 0:X}}}," for c, m in dec_items], 5)}
}};
const size_t col_uni_n_decomp = {len(dec_items)};

/* the primary composites: indices into col_uni_decomp, sorted by (first, second) */
const uint16_t col_uni_compose[] = {{
{rows([f"{i}," for i in comp_idx], 14)}
}};
const size_t col_uni_n_compose = {len(comp_idx)};

/* canonical combining classes other than 0: {{first, last, class}} */
const uint32_t col_uni_ccc_runs[][3] = {{
{rows([f"{{0x{s:X},0x{e:X},{v}}}," for s, e, v in ccc_runs], 6)}
}};
const size_t col_uni_n_ccc = {len(ccc_runs)};

/* lowercase: {{first, last, delta, step}}: first, first+step, ... last map to cp + delta
 * (U+0130 is handled in the code: it becomes two characters) */
const int32_t col_uni_lower_runs[][4] = {{
{rows([f"{{0x{s:X},0x{e:X},{d},{st}}}," for s, e, d, st in low_runs], 5)}
}};
const size_t col_uni_n_lower = {len(low_runs)};
"""
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(src)
    print(f"{OUT}: {len(dec_items)} decompositions, {len(comp_idx)} compositions, {len(ccc_runs)} class runs "
          f"({len(ccc)} marks), {len(low_runs)} lowercase runs ({len(low)} code points)")


if __name__ == "__main__":
    main()
