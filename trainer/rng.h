/*
 * rng.h - the one random number generator of xtrain: xoshiro256** (Blackman
 * & Vigna 2018), seeded through splitmix64 so that any 64-bit seed gives a
 * well-mixed state. It is small, fast and its whole state is four words,
 * which checkpoints store as text so that a resumed run draws the same
 * numbers. Parameter initialisation uses seed --seed; the sampler of epoch e
 * uses a generator seeded with --seed + e (torch DistributedSampler's rule).
 */
#ifndef XTRAIN_RNG_H
#define XTRAIN_RNG_H

#include <stdint.h>

typedef struct rng {
  uint64_t s[4];
} rng;

/* Fill the state from seed with splitmix64. */
void rng_seed(rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t rng_next(rng *r);
/* Uniform in [0, 1) with 24 random bits, the precision of a float. */
float rng_uniform(rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire 2019). */
uint64_t rng_below(rng *r, uint64_t n);

#endif /* XTRAIN_RNG_H */
