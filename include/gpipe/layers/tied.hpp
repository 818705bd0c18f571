#pragma once
// Tied embeddings (Press & Wolf 2017; GPT-2; Megatron-LM across pipeline
// stages): `{type: lm_head, vocabulary: V, tie: token_embedding}` makes the
// head's weight W (V, d) and the model's token_embedding weight E (V, d) one
// parameter, counted and checkpointed once (in the embedding's layer). On
// one rank (K = 1, rank 0 of the V schedules) it is one matrix: Runner binds
// the head's values to E's (pipeline/runner.hpp, shared_tied_head) and keeps
// the head's gradient in its own slot, which Pipeline adds into dE before the
// update. On two cells each holds its copy and Pipeline keeps them bitwise
// equal: the head starts from E, and before every update each receives the
// sum of the two gradients (docs/design.md, "Language model: tokens,
// clipping and tied embeddings").

#include "gpipe/model/shapes.hpp"

namespace gpipe {

/// The layers a model ties, by index in model.layers; -1 when untied.
struct TiedLayers {
  int embedding = -1;  ///< the token_embedding (the first in the model)
  int head = -1;       ///< the lm_head with tie: token_embedding
  bool tied() const { return head >= 0; }
};

/// The tied pair of `model`. Throws InputError naming the head's deck
/// position when an lm_head ties but the model has no token_embedding, when
/// their weights differ in shape ("(V, d) vs (V', d')"), or when more than one
/// lm_head ties.
TiedLayers tied_layers(const ModelSpec& model);

}  // namespace gpipe
