/* Pre-tokenizer: splits text into the pieces that BPE merges never cross.
 *
 * It follows GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written out by hand over bytes, with these byte classes:
 *   letter: A-Z, a-z and every byte >= 0x80 (so UTF-8 words, and any
 *           non-ASCII run, stay in one piece);
 *   digit:  0-9;
 *   space:  ' ', '\t', '\n', '\v', '\f', '\r';
 *   other:  every remaining byte (ASCII punctuation, controls, NUL).
 * At each position the first rule that applies wins:
 *   1. "'" followed by s, t, m, d, re, ve or ll (lower case only): that
 *      contraction;
 *   2. an optional ' ' then a run of letters, or of digits, or of others
 *      (a ' ' followed by any non-space byte always starts such a piece);
 *   3. a run of spaces reaching the end of the text: all of it;
 *   4. a run of two or more spaces followed by a non-space: all but its last
 *      byte (which then starts the next piece by rule 2 if it is ' ', or is
 *      a piece alone by rule 5);
 *   5. a single space byte.
 * Differences from the Unicode regex: non-ASCII punctuation, digits and
 * spaces (U+2014, U+0660, U+00A0, ...) count as letters here. Pieces always
 * cover the text exactly, in order, so splitting loses nothing. */
#ifndef FIVEFOLD_TOK_PRETOK_H
#define FIVEFOLD_TOK_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* Length of the piece that starts at text[pos] (pos < len); always >= 1. */
size_t tok_pretok_next(const uint8_t *text, size_t len, size_t pos);

/* Calls fn(piece, piece_len, ctx) for each piece in order; stops early and
 * returns fn's value when it is non-zero, else returns 0. */
typedef int (*TokPieceFn)(const uint8_t *piece, size_t len, void *ctx);
int tok_pretokenize(const uint8_t *text, size_t len, TokPieceFn fn, void *ctx);

#endif
