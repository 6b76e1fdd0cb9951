#!/usr/bin/env bash
# Peer test: `pare distill` of a language model, token by token. A byte-level BPE of 1,000 tokens is
# trained by `tokenizers` on the fortunes, and `pare train` makes a 3-layer Llama teacher on
# /usr/share/games/fortunes/computers; then:
#   - the student from-teacher:layers=0,2 holds the teacher's layers 0 and 2 (transformers reads its
#     folder: 2 layers, the weights equal the teacher's bit for bit, and its logits equal pare's
#     within 1e-4);
#   - distilling it with each --loss (fkl, rkl, jsd:0.5, skl:0.1, topk:64) and --alpha 1 (the teacher's
#     distributions alone, no next-token labels) closes at least half of its held-out perplexity gap
#     to the teacher;
#   - the chunked loss (--chunk-tokens 32, 8 chunks a batch) and the whole logits (--chunk-tokens 0)
#     train the same student: the same loss after 10 steps within 1e-5 relative, and so do 2 ranks
#     under pare launch (data parallel) and 1 process, and 2 ranks beside a teacher sharded over them
#     (--teacher-parallel tp, the loss over its vocabulary blocks, and pp); topk:K beside a tp teacher,
#     tp in one process and a sharded cache exit 2;
#   - a new student from a spec takes the teacher's tokenizer; one with another tokenizer, a --hint, an
#     unknown --loss and a layer the teacher lacks exit 2, naming the problem, writing nothing;
#   - pare teacher-cache of the teacher (top 64 tokens a row): distilling from it follows the online
#     teacher's topk:64 (the loss after 10 steps within 1%, the cache's 8-bit log-probabilities); 2
#     ranks under pare launch write the same rows as 1 process; a sampled cache trains; other windows,
#     another temperature, rkl from draws and from-teacher: students of a cache exit 2;
#   - --sequence-kd: the teacher's greedy continuations equal transformers' generate() (do_sample
#     False) window by window; a second run reads the folder back, a run asking another temperature
#     exits 2; 2 ranks under pare launch write the 1-process set, sampled draws included;
#   - --on-policy 0.5 (GKD) trains on the student's own continuations in every second batch (the
#     continuations themselves are checked in tests/lm/on_policy_test.cpp); with a cache, or a share
#     above 1, it exits 2.
# Env: PARE, PARE_PYTHON. Without transformers/tokenizers the test fails under make test and CI.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, transformers, tokenizers, safetensors, numpy"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-lm-distill.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export PARE_CACHE_DIR=$tmp/cache
text=/usr/share/games/fortunes/computers
need "Debian's fortunes ($text)" test -f "$text"

"$PY" "$here/peer_util.py" bpe "$tmp/tokenizer.json" --text "$text" --vocab 1000
"$PY" "$here/peer_util.py" bpe "$tmp/other.json" --text "$text" --vocab 900
data=(--data "text:$text" --seq-len 64 --batch-size 16 --seed 1)
"$PARE" train --model llama:layers=3,dim=64,heads=4,kv-heads=2,ff=128,ctx=128 --tokenizer "$tmp/tokenizer.json" \
  "${data[@]}" --epochs 3 --lr 3e-3 --out "$tmp/teacher" -q
ppl() { "$PARE" eval "hf:$1" --data "text:$text" --seq-len 64 --json -q | "$PY" -c "import json,sys; print(json.load(sys.stdin)['perplexity'])"; }
teacher=$(ppl "$tmp/teacher")
kd=(--teacher "hf:$tmp/teacher" "${data[@]}" --epochs 1 -q)
# The undistilled student: one step at a learning rate too small to move the weights.
"$PARE" distill "${kd[@]}" --student from-teacher:layers=0,2 --max-steps 1 --lr 1e-9 --out "$tmp/init"
before=$(ppl "$tmp/init")
echo "held-out perplexity: teacher $teacher, student from-teacher:layers=0,2 before KD $before"

"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np, torch, transformers as tf
from safetensors.torch import load_file
d = sys.argv[1]
t, s = load_file(f"{d}/teacher/model.safetensors"), load_file(f"{d}/init/model.safetensors")
m = tf.AutoModelForCausalLM.from_pretrained(f"{d}/init").eval()
assert m.config.num_hidden_layers == 2, m.config.num_hidden_layers
for name, w in s.items():
    src = name.replace("layers.1.", "layers.2.")
    # The undistilled student took one step at lr 1e-9: Adam moved each weight by about 1e-9.
    assert torch.allclose(w, t[src], rtol=0, atol=1e-8), f"{name} differs from the teacher's {src}"
print(f"ok: the student's {len(s)} tensors are the teacher's layers 0 and 2 (within Adam's one step of 1e-9)")
ids = torch.randint(0, 1000, (2, 40), generator=torch.Generator().manual_seed(5))
with torch.no_grad():
    np.save(f"{d}/ref.npy", m(ids).logits.numpy())
np.save(f"{d}/ids.npy", ids.numpy())
PYEOF
"$PARE" run "hf:$tmp/init" -i "input_ids=$tmp/ids.npy" -o "logits=$tmp/pare.npy"
"$PY" -c "
import numpy as np, sys
d = np.abs(np.load(sys.argv[1] + '/ref.npy') - np.load(sys.argv[1] + '/pare.npy')).max()
print(f'max |pare - transformers| on the derived student: {d:.2e}'); sys.exit(0 if d <= 1e-4 else 1)" "$tmp"

for loss in fkl rkl jsd:0.5 skl:0.1 topk:64; do
  "$PARE" distill "${kd[@]}" --student from-teacher:layers=0,2 --loss "$loss" --alpha 1 --lr 2e-3 --out "$tmp/kd"
  after=$(ppl "$tmp/kd")
  echo "--loss $loss: held-out perplexity $before -> $after (teacher $teacher)"
  "$PY" -c "import sys; b, a, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - t) < 0.5 * (b - t) else 1)" \
    "$before" "$after" "$teacher" || { echo "FAIL: --loss $loss did not bring the student half way to the teacher"; exit 1; }
done

# Chunked and whole logits: the same training (the loss after 10 steps; sums in another order).
for c in 0 32; do
  "$PARE" distill "${kd[@]}" --student from-teacher:layers=0,2 --loss jsd:0.5 -T 2 --alpha 0.7 --max-steps 10 --no-val \
    --lr 2e-3 --chunk-tokens $c --json --out "$tmp/c$c" >"$tmp/c$c.json"
done
"$PY" - "$tmp" <<'PYEOF'
import json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/c{c}.json"))["train_loss"] for c in (0, 32))
print(f"train loss after 10 steps: whole logits {a:.8f}, chunks of 32 tokens {b:.8f}")
sys.exit(0 if abs(a - b) <= 1e-5 * abs(a) else 1)
PYEOF

# Data parallel under pare launch: 2 ranks train the student as 1 does (the same loss after 10 steps),
# and so they do beside a teacher sharded over them: tensor parallel (the KD loss over its vocabulary
# blocks, no logits gathered) and pipeline parallel (jsd:0.5 at T=2, alpha 0.7, to take every term).
ddp=("${kd[@]}" --student from-teacher:layers=0 --max-steps 10 --no-val --threads 1 --lr 2e-3 --json)
for run in 1:none 2:none 2:tp 2:pp 2:none:jsd 2:tp:jsd 2:pp:jsd; do
  IFS=: read -r n mode loss <<<"$run"
  extra=()
  [[ -n $loss ]] && extra=(--loss jsd:0.5 -T 2 --alpha 0.7)
  "$PARE" launch --nproc-per-node "$n" -- "$PARE" distill "${ddp[@]}" "${extra[@]}" --teacher-parallel "$mode" \
    --out "$tmp/ddp" >"$tmp/ddp-$n-$mode$loss.txt"
done
"$PY" - "$tmp" <<'PYEOF'
import json, sys
d = sys.argv[1]
def loss(run):
    line = [l for l in open(f"{d}/ddp-{run}.txt") if "{" in l][-1]
    return json.loads(line[line.index("{"):])["train_loss"]
ok = True
for run, ref in (("2-none", "1-none"), ("2-tp", "2-none"), ("2-pp", "2-none"), ("2-tpjsd", "2-nonejsd"),
                 ("2-ppjsd", "2-nonejsd")):
    a, b = loss(ref), loss(run)
    print(f"train loss after 10 steps: {ref} {a:.8f}, {run} {b:.8f}")
    ok &= abs(a - b) <= 1e-5 * abs(a)
sys.exit(0 if ok else 1)
PYEOF
rc=0
"$PARE" launch --nproc-per-node 2 -- "$PARE" distill "${ddp[@]}" --teacher-parallel tp --loss topk:8 \
  --out "$tmp/bad" 2>"$tmp/err.txt" || rc=$?
[[ $rc == 2 ]] && grep -q "whole vocabulary" "$tmp/err.txt" && [[ ! -e "$tmp/bad" ]] ||
  { echo "FAIL: topk:8 beside a tensor-parallel teacher: exit $rc: $(cat "$tmp/err.txt")"; exit 1; }
echo "ok: topk:8 beside a tensor-parallel teacher refused"

# A new student from a spec: the teacher's tokenizer and vocabulary, written with the folder.
"$PARE" distill "${kd[@]}" --student llama:layers=1,dim=32,heads=2,kv-heads=1,ff=64,ctx=128 --max-steps 5 --no-val \
  --out "$tmp/new"
cmp "$tmp/new/tokenizer.json" "$tmp/teacher/tokenizer.json" || { echo "FAIL: the new student lacks the teacher's tokenizer"; exit 1; }
echo "ok: a new student from a spec has the teacher's tokenizer"

refuse() {  # refuse WHAT PATTERN ARGS...: exit 2, the message has PATTERN, nothing written
  local what=$1 pattern=$2 rc=0
  shift 2
  "$PARE" distill "$@" --out "$tmp/bad" 2>"$tmp/err.txt" || rc=$?
  [[ $rc == 2 ]] && grep -q -- "$pattern" "$tmp/err.txt" && [[ ! -e "$tmp/bad" ]] ||
    { echo "FAIL: $what: exit $rc: $(cat "$tmp/err.txt")"; exit 1; }
  echo "ok: $what refused: $(tail -1 "$tmp/err.txt")"
}
refuse "another tokenizer" "different tokenizers (900 and 1000 tokens" \
  "${kd[@]}" --student llama:layers=1,dim=32,heads=2,kv-heads=1,ff=64,ctx=128 --tokenizer "$tmp/other.json"
refuse "a hint" "a language model takes --loss" "${kd[@]}" --student from-teacher:layers=0 --hint a:b
refuse "an unknown loss" "unknown divergence 'kld'" "${kd[@]}" --student from-teacher:layers=0 --loss kld
refuse "a layer the teacher lacks" "it has no layer 3" "${kd[@]}" --student from-teacher:layers=0,3
refuse "a sharded teacher in one process" "needs more than one process" "${ddp[@]}" --teacher-parallel tp
# A teacher cache: the teacher's top 64 tokens a row, then the student distilled from it as from the
# teacher online with --loss topk:64 (the cache's log-probabilities are 8-bit: within 1%).
"$PARE" teacher-cache --teacher "hf:$tmp/teacher" --data "text:$text" --seq-len 64 --json -q --out "$tmp/tc" \
  >"$tmp/tc.json"
"$PARE" launch --nproc-per-node 2 -- "$PARE" teacher-cache --teacher "hf:$tmp/teacher" --data "text:$text" \
  --seq-len 64 --threads 1 -q --out "$tmp/tc2"
"$PARE" teacher-cache --teacher "hf:$tmp/teacher" --data "text:$text" --seq-len 64 --sample 32 -q --out "$tmp/sampled"
steps=("${data[@]}" --student "hf:$tmp/init" --alpha 1 --max-steps 10 --no-val --lr 2e-3 --json -q)
"$PARE" distill --teacher "cache:$tmp/tc" --loss fkl "${steps[@]}" --out "$tmp/from-cache" >"$tmp/cache.json"
refuse "a cache sharded" "shards a teacher that runs" --teacher "cache:$tmp/tc" "${steps[@]}" --teacher-parallel tp
"$PARE" distill --teacher "hf:$tmp/teacher" --loss topk:64 "${steps[@]}" --out "$tmp/from-hf" >"$tmp/hf.json"
"$PARE" distill --teacher "cache:$tmp/sampled" "${data[@]}" --student "hf:$tmp/init" --max-steps 5 --no-val -q \
  --out "$tmp/from-sampled"
"$PY" - "$tmp" <<'PYEOF'
import json, sys, numpy as np
d = sys.argv[1]
c = json.load(open(f"{d}/tc.json"))
print(f"teacher cache: {c['tokens']} tokens x top {c['entries']} of {c['vocab']}, "
      f"{c['bytes_per_token']:.1f} bytes a token")
assert c["entries"] == 64 and 64 < c["bytes_per_token"] < 140, c
one = np.load(f"{d}/tc/shard-0.rows.npy")
two = np.concatenate([np.load(f"{d}/tc2/shard-{r}.rows.npy") for r in (0, 1)])
assert one.dtype == np.uint8 and np.array_equal(one, two), "2 ranks wrote other rows than 1 process"
print(f"ok: 2 ranks under pare launch wrote the same {one.size} bytes of rows as 1 process")
a, b = (json.load(open(f"{d}/{w}.json"))["train_loss"] for w in ("hf", "cache"))
print(f"train loss after 10 steps: online topk:64 {a:.6f}, from the cache {b:.6f}")
sys.exit(0 if abs(a - b) <= 0.01 * abs(a) else 1)
PYEOF
kc=(--teacher "cache:$tmp/tc" --epochs 1 -q --student "hf:$tmp/init")
refuse "a cache of other windows" "rebuild it from the same text in windows of the same length" "${kc[@]}" \
  --data "text:$text" --seq-len 32
refuse "a cache at another temperature" "at T=1; distill with --temperature 1" "${kc[@]}" "${data[@]}" -T 2
refuse "rkl from sampled draws" "holds draws" --teacher "cache:$tmp/sampled" "${data[@]}" --student "hf:$tmp/init" \
  --loss rkl
refuse "a from-teacher: student of a cache" "holds its outputs, not its weights" --teacher "cache:$tmp/tc" \
  "${data[@]}" --student from-teacher:layers=0
# Sequence-level KD on a smaller text (the teacher decodes every window once).
short=/usr/share/games/fortunes/riddles
skd=(--teacher "hf:$tmp/teacher" --student "hf:$tmp/init" --data "text:$short" --seq-len 64 --batch-size 16 --seed 1
     --max-new-tokens 24 --max-steps 2 --no-val -q)
"$PARE" distill "${skd[@]}" --sequence-kd "$tmp/skd" --gen-temperature 0 --out "$tmp/from-skd"
"$PARE" distill "${skd[@]}" --sequence-kd "$tmp/skd" --gen-temperature 0 --out "$tmp/from-skd2"
for n in 1 2; do
  "$PARE" launch --nproc-per-node $n -- "$PARE" distill "${skd[@]}" --threads 1 --sequence-kd "$tmp/skd-sampled$n" \
    --out "$tmp/from-sampled$n" >/dev/null
done
"$PY" - "$tmp" <<'PYEOF' 2>&1 | grep -v "^Loading"
import json, sys, numpy as np, torch, transformers as tf
d = sys.argv[1]
x, y = np.load(f"{d}/skd/x-0.npy"), np.load(f"{d}/skd/y-0.npy")
assert (y[:, :39] == -100).all() and (y[:, 39:] != -100).all(), "only the continuations count"
m = tf.AutoModelForCausalLM.from_pretrained(f"{d}/teacher").eval()
for w in range(0, len(x), max(1, len(x) // 12)):
    with torch.no_grad():
        ref = m.generate(torch.tensor(x[w:w + 1, :40]), max_new_tokens=25, do_sample=False,
                         pad_token_id=0)[0, 40:].numpy()
    assert np.array_equal(y[w, 39:], ref), f"window {w}: pare {y[w, 39:]} transformers {ref}"
print(f"ok: pare's greedy continuations of {len(x)} windows equal transformers' generate() (checked every "
      f"{max(1, len(x) // 12)}th)")
one = [np.load(f"{d}/skd-sampled1/{f}-0.npy") for f in "xy"]
two = [np.concatenate([np.load(f"{d}/skd-sampled2/{f}-{r}.npy") for r in (0, 1)]) for f in "xy"]
assert all(np.array_equal(a, b) for a, b in zip(one, two)), "2 ranks sampled other continuations than 1 process"
assert not np.array_equal(one[0], x), "the sampled set equals the greedy one"
print(f"ok: 2 ranks under pare launch wrote the 1-process sampled set ({one[0].shape[0]} windows)")
PYEOF
refuse "a sequence-KD folder of another temperature" "holds the teacher's continuations for temperature 0.0" \
  "${skd[@]}" --sequence-kd "$tmp/skd" --gen-temperature 0.7
# On-policy KD: every second batch is the student's own continuations, scored by the teacher.
"$PARE" distill "${skd[@]}" --on-policy 0.5 --loss jsd:0.5 --json --out "$tmp/from-gkd" >"$tmp/gkd.json"
"$PY" - "$tmp/gkd.json" <<'PYEOF'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert math.isfinite(r["train_loss"]) and r["train_loss"] > 0, r
print(f"ok: --on-policy 0.5 --loss jsd:0.5 trained 2 steps (the second on-policy), loss {r['train_loss']:.4f}")
PYEOF
refuse "on-policy KD from a cache" "scores the student's own tokens" "${kc[@]}" "${data[@]}" --on-policy 0.5
refuse "an on-policy share above 1" "on-policy" "${skd[@]}" --on-policy 1.5
echo "PASSED"
