#!/usr/bin/env bash
# The language model end to end: make_text_data.py on a small text, a short
# causal GPT run of inputs/kjv_gpt.yaml's kind on 2 ranks (K = 2, tied
# embeddings), gpipe-infer --generate: greedy continuation bitwise the same
# on 1 and 2 ranks, a seeded sample reproducible, the prompt kept, and the
# errors for a character outside the vocabulary and a non-language model.
# Usage: language_model.sh SOURCE_DIR GPIPE_TRAIN GPIPE_INFER PYTHON MPIEXEC [MPIEXEC_FLAGS...]
set -eu
src=$1 train=$2 infer=$3 python=$4 mpiexec=$5
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for i in $(seq 1 40); do
  printf '\nBook %d\n\n  1 In the beginning was the word, and the word was with God.\n  2 And the light shineth in darkness.\n' "$i"
done >"$tmp/text.txt"
"$python" "$src/scripts/make_text_data.py" "$tmp" --text "$tmp/text.txt" >"$tmp/data.log"
grep -q "vocabulary 33" "$tmp/data.log" || { cat "$tmp/data.log"; echo "FAIL: vocabulary"; exit 1; }
cat >"$tmp/deck.yaml" <<DECK
seed: 5
model:
  input: 16
  loss: token_cross_entropy
  layers:
    - {type: token_embedding, vocabulary: 33, width: 16}
    - {type: pos_embed}
    - {type: transformer_block, heads: 2, hidden: 32, causal: true}
    - {type: transformer_block, heads: 2, hidden: 32, causal: true}
    - {type: lm_head, vocabulary: 33, tie: token_embedding}
data: {format: tokens, train_file: $tmp/kjv_train.h5, test_file: $tmp/kjv_validation.h5}
training: {epochs: 4, batch_size: 16, micro_batches: 4, progress_every: 0}
optimizer: {type: adamw, lr: 0.01, warmup_steps: 5, clip_norm: 1.0, schedule: cosine}
checkpoint: {directory: $tmp/ckpt, every_epochs: 4}
DECK
"$mpiexec" -n 2 "$@" "$train" "$tmp/deck.yaml" --summary "$tmp/summary.json" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; exit 1; }
"$python" - "$tmp/summary.json" <<'PY'
import json, math, sys
j = json.load(open(sys.argv[1]))
first, last = j["history"][0]["test_loss"], j["history"][-1]["test_loss"]
assert j["tokens_per_sample"] == 16, j
assert abs(j["test_perplexity"] - math.exp(last)) < 1e-3 * j["test_perplexity"], j
assert abs(j["test_bits_per_token"] - last / math.log(2)) < 1e-6 + 1e-4 * last, j
if not last < first < math.log(33) + 0.5:
    sys.exit(f"FAIL: the validation loss did not fall ({first} -> {last})")
print(f"ok   validation loss per token {first:.3f} -> {last:.3f}, perplexity {j['test_perplexity']:.2f}")
PY
ckpt=$(ls "$tmp"/ckpt/ckpt_*.h5)
for ranks in 1 2; do
  "$mpiexec" -n $ranks "$@" "$infer" "$ckpt" --generate "In the" --tokens 30 --temperature 0 \
    >"$tmp/greedy$ranks.txt" 2>"$tmp/greedy$ranks.err" || { cat "$tmp/greedy$ranks.err"; exit 1; }
done
cmp -s "$tmp/greedy1.txt" "$tmp/greedy2.txt" || { cat "$tmp/greedy1.txt" "$tmp/greedy2.txt"; echo "FAIL: greedy differs on 1 and 2 ranks"; exit 1; }
[ "$(head -c 6 "$tmp/greedy1.txt")" = "In the" ] || { cat "$tmp/greedy1.txt"; echo "FAIL: prompt not kept"; exit 1; }
[ "$(wc -c <"$tmp/greedy1.txt")" -eq 37 ] || { cat "$tmp/greedy1.txt"; echo "FAIL: not 6 + 30 characters"; exit 1; }
for run in a b; do
  "$mpiexec" -n 2 "$@" "$infer" "$ckpt" --generate "And" --tokens 30 --temperature 0.9 --top-k 5 --seed 11 \
    >"$tmp/sample_$run.txt" 2>/dev/null
done
cmp -s "$tmp/sample_a.txt" "$tmp/sample_b.txt" || { echo "FAIL: a seeded sample is not reproducible"; exit 1; }
echo "ok   generate: greedy bitwise equal on 1 and 2 ranks: $(cat "$tmp/greedy1.txt")"
if "$infer" "$ckpt" --generate "In the ~" 2>"$tmp/err" >/dev/null; then echo "FAIL: '~' accepted"; exit 1; fi
grep -qF -- "--generate: character 7 of the prompt ('~') is not in the vocabulary of $tmp/kjv_train.h5" "$tmp/err" ||
  { cat "$tmp/err"; exit 1; }
echo "ok   language model"
