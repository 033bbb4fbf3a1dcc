#pragma once
// A branched decay (Hägele et al. 2024, arXiv 2405.18392; MiniCPM, arXiv 2404.06395): one long
// warmup-stable-decay run, and from any checkpoint of its stable phase a short decay trained as
// a run of its own, which stands for a whole run of that length. `siamese train CONFIG
// --decay-from RUN/stepN` makes the branch's config: the config's WSD schedule (scheduler.t_decay
// is the branch's decay, K) over a run of N + K steps (tokens with scheduler.units tokens) that
// starts from RUN/stepN, in its own save folder (RUN_decayN+K beside RUN unless the config names
// another), and resumes from that folder when it holds a checkpoint. The config keeps the parent
// in `decay_from`, so run.json and config.yaml name it.
#include <string>

#include "siamese/config/config.h"

namespace siamese::train {

// The branch's config from `cfg` (whose decay_from names the parent checkpoint). Refuses,
// naming the key or the folder: a parent that is no intact checkpoint; a schedule other than
// wsd or without scheduler.t_decay; a parent step outside its own stable phase (its learning
// rate there is not the peak, so the branch would not continue the stable run).
config::TrainConfig decay_branch(const config::TrainConfig& cfg);

}  // namespace siamese::train
