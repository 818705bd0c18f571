#pragma once
// Tied embeddings (Press & Wolf 2017; GPT-2; Megatron-LM across pipeline
// stages): `{type: lm_head, vocabulary: V, tie: token_embedding}` makes the
// head's weight W (V, d) and the model's token_embedding weight E (V, d) one
// parameter. Both layers keep their tensor (checkpoints and partitions are
// per layer as always) and Pipeline keeps them bitwise equal: the head starts
// from E, and before every update each receives the sum of the two
// gradients (docs/design.md, "Language model: tokens, clipping and tied
// embeddings").

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
