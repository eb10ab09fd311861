// rope.c: the rotary frequency rules of rope.h.
#include <math.h>
#include <stddef.h>

#include "common/rope.h"

const char *rope_kind_name(RopeKind k) {
    static const char *names[ROPE_KINDS] = {"default", "linear", "llama3", "yarn", "longrope"};
    return k >= 0 && k < ROPE_KINDS ? names[k] : "?";
}

// YaRN's mscale (the YaRN paper's eq. 21): 0.1 * m * ln(s) + 1 for s > 1.
static double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }

// The dimension (of dim) whose wavelength turns `rotations` times over n positions.
static double yarn_correction_dim(double rotations, double dim, double base, double n) {
    return dim * log(n / (rotations * 2 * M_PI)) / (2 * log(base));
}

const char *rope_frequencies(const RopeRule *r, int64_t dim, double *inv_freq, double *scale) {
    int64_t half = dim / 2;
    if (!(r->theta > 0) || isinf(r->theta)) return "theta must be a positive number";
    for (int64_t i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(r->theta, (double)(2 * i) / (double)dim);
    *scale = 1.0;
    double factor = r->factor;
    if (r->kind != ROPE_DEFAULT && factor == 0 && r->original_max > 0 && r->max_positions > 0 &&
        (r->kind == ROPE_YARN || r->kind == ROPE_LONGROPE))
        factor = r->max_positions / r->original_max;
    switch (r->kind) {
    case ROPE_DEFAULT: return NULL;
    case ROPE_LINEAR:
        if (!(factor > 0)) return "linear scaling needs factor > 0";
        for (int64_t i = 0; i < half; i++) inv_freq[i] /= factor;
        return NULL;
    case ROPE_LLAMA3: {
        double lo = r->low_freq_factor, hi = r->high_freq_factor, old = r->original_max;
        if (!(factor > 0)) return "llama3 scaling needs factor > 0";
        if (!(lo > 0) || !(hi >= lo)) return "llama3 scaling needs 0 < low_freq_factor <= high_freq_factor";
        if (!(old > 0)) return "llama3 scaling needs original_max_position_embeddings > 0";
        double low_wavelen = old / lo, high_wavelen = old / hi;
        for (int64_t i = 0; i < half; i++) {
            double f = inv_freq[i], wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) {
                inv_freq[i] = f / factor;                      // long wavelengths: interpolated
            } else if (!(wavelen < high_wavelen) && hi > lo) { // between: smoothed from one to the other
                // (low = high, Llama 4's: no band between; transformers' 0 / 0 there
                // would reach only a wavelength equal to the bound, which keeps f here)
                double smooth = (old / wavelen - lo) / (hi - lo);
                inv_freq[i] = (1 - smooth) * f / factor + smooth * f;
            }
        }
        return NULL;
    }
    case ROPE_YARN: {
        if (!(factor > 0)) return "yarn scaling needs factor > 0 (or max_position_embeddings)";
        if (!(r->original_max > 0)) return "yarn scaling needs original_max_position_embeddings > 0";
        double fast = r->beta_fast > 0 ? r->beta_fast : 32, slow = r->beta_slow > 0 ? r->beta_slow : 1;
        double lo = yarn_correction_dim(fast, (double)dim, r->theta, r->original_max);
        double hi = yarn_correction_dim(slow, (double)dim, r->theta, r->original_max);
        if (r->truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > (double)(dim - 1)) hi = (double)(dim - 1);
        if (lo == hi) hi += 0.001; // transformers' guard against a zero-width ramp
        for (int64_t i = 0; i < half; i++) {
            double ramp = ((double)i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrapolate = 1 - ramp; // 1: the pair keeps its frequency, 0: interpolated by factor
            inv_freq[i] = inv_freq[i] / factor * (1 - extrapolate) + inv_freq[i] * extrapolate;
        }
        if (r->attention_factor > 0) *scale = r->attention_factor;
        else if (r->mscale > 0 && r->mscale_all_dim > 0)
            *scale = yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim);
        else *scale = yarn_mscale(factor, 1);
        return NULL;
    }
    case ROPE_LONGROPE: {
        if (!(r->original_max > 0)) return "longrope scaling needs original_max_position_embeddings > 0";
        if (r->nfactors != half) return "longrope's short_factor and long_factor need one factor per rotated pair";
        for (int64_t i = 0; i < half; i++) {
            if (!(r->factors[i] > 0)) return "longrope's factors must be positive";
            inv_freq[i] /= r->factors[i];
        }
        if (r->attention_factor > 0) *scale = r->attention_factor;
        else if (factor > 1) *scale = sqrt(1 + log(factor) / log(r->original_max));
        return NULL;
    }
    case ROPE_KINDS: break;
    }
    return "unknown rope scaling";
}
