/* "Did you mean ...?": the closest known name to a misspelt one, for the
 * messages of config readers and the command-line parser. */
#ifndef FIVEFOLD_BASE_NEAR_MISS_H
#define FIVEFOLD_BASE_NEAR_MISS_H

/* Levenshtein distance; names longer than 63 bytes are "far" (a large value). */
int near_miss_distance(const char *a, const char *b);

/* The candidate closest to word, or NULL when none is within
 * max(2, strlen(word)/3 + 1) edits (close enough that a typo is likely).
 * Ties go to the earlier candidate. */
const char *near_miss(const char *word, const char *const *candidates, int n);

#endif
