/* Byte-level BPE tokenizer (GPT-2 style), compatible with Hugging Face
 * tokenizer.json files.
 *
 * Ids and text. Every token is a byte string; decoding concatenates them, so
 * any byte sequence (invalid UTF-8 and NULs included) round-trips exactly:
 * the base vocabulary holds all 256 single bytes. A tokenizer trained here
 * gives byte b the id b, merge number r (its rank) the id 256 + r, and the
 * special tokens (by default only "<|endoftext|>") the last ids, after the
 * merges, as GPT-2 does. A loaded tokenizer.json keeps its own ids, which may
 * be arbitrary and may leave unused holes (decoding a hole is an error).
 *
 * Encoding. Text is split into pieces by tok_pretokenize (pretok.h); inside a
 * piece the pair of adjacent tokens with the lowest merge rank is merged,
 * leftmost first on equal ranks, until no adjacent pair has a merge. Added
 * (special) tokens are recognised in the text only when asked
 * (TOK_ENCODE_SPECIAL); otherwise "<|endoftext|>" in the text is ordinary
 * bytes, which keeps raw training text from forging document boundaries.
 *
 * Threads. A Tokenizer is read-only after creation and may be shared; each
 * thread that encodes uses its own TokEncoder (it holds the word cache). */
#ifndef FIVEFOLD_TOK_TOKENIZER_H
#define FIVEFOLD_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define TOK_EOT "<|endoftext|>"
/* Ids in a loaded file must be below this; a bigger id is taken as a corrupt
 * file rather than a reason to allocate gigabytes (real vocabularies stay
 * under 300k). */
#define TOK_MAX_ID (1 << 22)

typedef struct Tokenizer Tokenizer;

/* A growable array of token ids; zero-initialise, free with tok_ids_free. */
typedef struct TokIds {
  int32_t *ids;
  size_t n, cap;
} TokIds;

int tok_ids_push(TokIds *v, int32_t id, Error *err);
int tok_ids_reserve(TokIds *v, size_t cap, Error *err);
void tok_ids_free(TokIds *v);

/* ---- training ---- */

typedef struct TokTrainOptions {
  /* Total ids wanted: 256 bytes + merges + special tokens. Training stops
   * early (a smaller vocabulary) when no adjacent pair is left that occurs
   * at least min_frequency times. */
  int vocab_size;
  int min_frequency;            /* 0 means 1 */
  const char **special_tokens;  /* NULL: just TOK_EOT */
  int n_special;
  int verbose;                  /* log progress with log_info */
} TokTrainOptions;

/* Learns merges from the given text buffers (each split and counted on its
 * own, so no word spans two buffers). Ties between equally frequent pairs go
 * to the smallest (left id, right id). */
int tok_train(Tokenizer **out, const uint8_t *const *texts, const size_t *lens, int n_texts,
              const TokTrainOptions *opts, Error *err);

/* ---- inspection ---- */

void tok_free(Tokenizer *tok);
int tok_vocab_size(const Tokenizer *tok);  /* highest id + 1 (holes included) */
int tok_num_merges(const Tokenizer *tok);
/* Merge of rank r: left id + right id -> result id. */
void tok_merge(const Tokenizer *tok, int rank, int32_t *left, int32_t *right, int32_t *result);
/* Bytes of token `id`; NULL (and *len = 0) for a hole or an id out of range. */
const uint8_t *tok_token_bytes(const Tokenizer *tok, int32_t id, size_t *len);
int32_t tok_byte_id(const Tokenizer *tok, uint8_t byte); /* -1 if the vocab lacks it */
/* Id of the added token with this content, or -1. */
int32_t tok_added_id(const Tokenizer *tok, const char *content);
int32_t tok_eot_id(const Tokenizer *tok); /* tok_added_id(tok, TOK_EOT) */
int tok_is_added(const Tokenizer *tok, int32_t id);

/* ---- encoding and decoding ---- */

enum { TOK_ENCODE_SPECIAL = 1 }; /* match added tokens' literal text */

typedef struct TokEncoder TokEncoder;

/* The encoder borrows tok, which must outlive it. */
int tok_encoder_new(TokEncoder **out, const Tokenizer *tok, Error *err);
void tok_encoder_free(TokEncoder *enc);

/* Appends the ids of text[0, len) to out. A pretokenizer setting of
 * add_prefix_space (from a loaded file) puts a space in front of the text
 * when it does not already start with one. */
int tok_encode(TokEncoder *enc, const uint8_t *text, size_t len, int flags, TokIds *out, Error *err);

/* Appends the bytes of ids to *buf (malloc'd, grown as needed; *buf may
 * start NULL with *len = *cap = 0). Fails on an id that names no token. */
int tok_decode(const Tokenizer *tok, const int32_t *ids, size_t n, uint8_t **buf, size_t *len,
               size_t *cap, Error *err);

/* ---- tokenizer.json ---- */

/* Writes a Hugging Face tokenizer.json (atomically: PATH.tmp, then rename). */
int tok_save_json(const Tokenizer *tok, const char *path, Error *err);
/* Reads a byte-level BPE tokenizer.json: ours or GPT-2-style ones (merges as
 * "a b" strings or ["a", "b"] pairs, any ids, added_tokens). Everything is
 * validated; errors name the file and field. */
int tok_load_json(Tokenizer **out, const char *path, Error *err);
/* Same, from a buffer; `name` stands for the file in messages. */
int tok_load_json_buffer(Tokenizer **out, const char *json, size_t len, const char *name, Error *err);

/* ---- GPT-2 byte <-> unicode mapping used for token strings in the file ---- */

/* Code point that stands for byte b (b itself when printable Latin-1). */
uint32_t tok_byte_to_codepoint(uint8_t b);
/* Byte a code point stands for, or -1 when it stands for none. */
int tok_codepoint_to_byte(uint32_t cp);
/* Byte-level text of bytes[0, n) as NUL-terminated UTF-8 (malloc'd; NULL on
 * allocation failure). */
char *tok_bytes_to_text(const uint8_t *bytes, size_t n);
/* Inverse: fills *bytes (malloc'd) or returns -1 when text is not valid UTF-8
 * or holds a code point that stands for no byte; *bad_cp gets that code point
 * (or 0xFFFFFFFF for invalid UTF-8). */
int tok_text_to_bytes(const char *text, uint8_t **bytes, size_t *n, uint32_t *bad_cp);

/* ---- whole files (the `fivefold tokenize --vocab-size N` path) ---- */

/* Encodes each input file into train and val id streams. Each file is cut
 * in two just past the first '\n' at or after byte (1 - val_fraction) * size
 * (exactly there when no newline follows; at its end when val_fraction is
 * 0); the head goes to train, the tail to val, and each non-empty part is
 * preceded by the end-of-text id, which therefore marks every document
 * start (as llm.c's data files do). Text is encoded as raw bytes: a literal
 * "<|endoftext|>" inside a file is not the special token. */
int tok_encode_files(const Tokenizer *tok, const char *const *inputs, int n_inputs, double val_fraction,
                     TokIds *train, TokIds *val, Error *err);

/* Trains a tokenizer of vocab_size ids on the train parts of the inputs (the
 * val tails are held out), writes out_dir/tokenizer.json (making out_dir if
 * needed), and encodes as tok_encode_files. *tok_out (may be NULL) receives
 * the tokenizer; the caller frees it and the id arrays. */
int tok_train_and_encode_files(const char *const *inputs, int n_inputs, int vocab_size, double val_fraction,
                               const char *out_dir, Tokenizer **tok_out, TokIds *train, TokIds *val,
                               Error *err);

#endif
