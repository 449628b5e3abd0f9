/* The data part of the run configuration that needs the files themselves:
 * the tokenizer must be the one the token shards were made with. A shard's
 * header records its vocabulary size; a BPE tokenizer.json has exactly
 * that many ids when `fivefold tokenize` made the shards with it, and a
 * byte-level tokenizer decodes only ids below 256. A mismatch trains fine
 * and samples garbage, so it is refused before training. See
 * train_config.h. */
#include <string.h>

#include "tok/tokenizer.h"
#include "data/token_shard.h"
#include "train/train_config.h"

#define BYTE_LEVEL_VOCAB 256

static int check_shards(const TrainConfig *cfg, char *const *paths, int n, const char *field, int tok_vocab,
                        const char *origin, Error *err) {
  int byte_level = !strcmp(cfg->tokenizer, TRAIN_TOKENIZER_BYTE_LEVEL);
  for (int i = 0; i < n; i++) {
    /* A file that is no valid shard is the data loader's to report, with
     * what is wrong with it; here only the header's vocabulary counts. */
    TokenShard s;
    Error ignored = {0};
    if (token_shard_open(&s, paths[i], 0, &ignored)) continue;
    uint32_t vocab = s.vocab_size;
    token_shard_close(&s);
    if (byte_level && vocab <= BYTE_LEVEL_VOCAB) continue;
    if (!byte_level && (int)vocab == tok_vocab) continue;
    if (byte_level)
      return error_set(err, ERR_CONFIG,
                       "%s: %s: %s has a vocabulary of %u ids but data.tokenizer is byte-level (256 ids): the shard "
                       "was made with another tokenizer (expected data.tokenizer to name its tokenizer.json)",
                       origin, field, paths[i], vocab);
    return error_set(err, ERR_CONFIG,
                     "%s: %s: %s has a vocabulary of %u ids but data.tokenizer %s has %d: the shard was not made "
                     "with this tokenizer (expected the tokenizer.json `fivefold tokenize` wrote with the shards%s)",
                     origin, field, paths[i], vocab, cfg->tokenizer, tok_vocab,
                     vocab <= BYTE_LEVEL_VOCAB ? ", or \"byte-level\" for byte-level shards" : "");
  }
  return 0;
}

int train_config_check_tokenizer_shards(const TrainConfig *cfg, const char *origin, Error *err) {
  int tok_vocab = BYTE_LEVEL_VOCAB;
  if (strcmp(cfg->tokenizer, TRAIN_TOKENIZER_BYTE_LEVEL)) {
    Tokenizer *tok = NULL;
    if (tok_load_json(&tok, cfg->tokenizer, err)) return error_wrap(err, "%s: data.tokenizer", origin);
    tok_vocab = tok_vocab_size(tok);
    tok_free(tok);
  }
  int rc = check_shards(cfg, cfg->train_paths, cfg->num_train, "data.train", tok_vocab, origin, err);
  if (!rc) rc = check_shards(cfg, cfg->val_paths, cfg->num_val, "data.val", tok_vocab, origin, err);
  return rc;
}
