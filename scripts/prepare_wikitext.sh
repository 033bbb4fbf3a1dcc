#!/usr/bin/env bash
# Tokenizes the WikiText-2 and PTB splits (train/valid/test) from ../shared/data with OLMo-1B's
# GPT-NeoX tokenizer into data/<corpus>/<split>.npy (raw uint16, OLMo memmap convention) plus a
# .npy.json sidecar each. Each split file is one document (its newlines kept as text), followed
# by one EOS (50279, OLMo-1B's eos_token_id), so perplexity is computed over the split as one
# stream, the way the word-level WikiText/PTB numbers are.
#
#   scripts/prepare_wikitext.sh            # uses build/siamese, writes data/
#   SIAMESE=build-x/siamese OUT=elsewhere scripts/prepare_wikitext.sh
set -euo pipefail
cd "$(dirname "$0")/.."
siamese=${SIAMESE:-build/siamese}
shared=${SIAMESE_SHARED_DIR:-$(cd .. && pwd)/shared}
[ -d "$shared/data" ] || {
  echo "prepare_wikitext: no data/ in $shared: set SIAMESE_SHARED_DIR to the shared folder" >&2
  exit 1
}
out=${OUT:-data}
tokenizer=${TOKENIZER:-$shared/tokenizers/olmo-gpt-neox-20b-pii-special.json}
threads=${THREADS:-2}

mkdir -p "$out/wikitext-2" "$out/ptb"
for split in train valid test; do
  "$siamese" tokenize --force --tokenizer "$tokenizer" --threads "$threads" \
    "$shared/data/wikitext-2/$split.txt" -o "$out/wikitext-2/$split.npy"
  "$siamese" tokenize --force --tokenizer "$tokenizer" --threads "$threads" \
    "$shared/data/ptb/ptb.$split.txt" -o "$out/ptb/$split.npy"
done
