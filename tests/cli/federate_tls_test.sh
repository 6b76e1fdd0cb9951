#!/usr/bin/env bash
# pare federate over TLS: a server with mutual TLS runs its rounds with clients whose certificates
# its CA signed; a plaintext client, a client of another CA, one without a certificate and one that
# expects another server name are all turned away; bad TLS flags are refused (exit 2).
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 300
data="npy:$work/x.npy,$work/y.npy"
pki="$work/pki"
mkdir -p "$pki"

# make_ca NAME, make_cert CA NAME SAN: a CA, and a certificate it signs for subjectAltName SAN.
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" -keyout "$pki/$1.key" -out "$pki/$1.pem" 2>/dev/null
}
make_cert() {
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$pki/$2.key" -out "$pki/$2.csr" 2>/dev/null &&
    printf 'subjectAltName=%s\n' "$3" >"$pki/$2.ext" &&
    openssl x509 -req -in "$pki/$2.csr" -CA "$pki/$1.pem" -CAkey "$pki/$1.key" -CAcreateserial -days 2 \
      -extfile "$pki/$2.ext" -out "$pki/$2.pem" 2>/dev/null
}
make_ca ca && make_ca rogue-ca && make_cert ca server DNS:pare-server && make_cert ca client DNS:client &&
  make_cert rogue-ca rogue DNS:rogue || fail "openssl could not make the test certificates"

"$PARE" federate server -m mlp:784-16-10 --dir "$work/srv" --clients 2 --rounds 2 --listen 127.0.0.1:0 \
  --port-file "$work/port" --val-data "$data" --join-timeout 120 --round-timeout 60 \
  --tls-cert "$pki/server.pem" --tls-key "$pki/server.key" --tls-client-ca "$pki/ca.pem" 2>"$work/srv.err" &
srv=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "the TLS server never listened: $(cat "$work/srv.err")"
grep -q "(mutual TLS)" "$work/srv.err" || fail "the server does not say it runs mutual TLS: $(cat "$work/srv.err")"
addr="127.0.0.1:$(cat "$work/port")"
client=("$PARE" federate client --server "$addr" -d "$data" --quiet)
good=(--tls-ca "$pki/ca.pem" --tls-cert "$pki/client.pem" --tls-key "$pki/client.key" --tls-server-name pare-server)

# Turned away: each gives up after --server-timeout (exit 1), and the server never hears of it.
expect_exit 1 "$addr" -- "${client[@]}" --id plain --server-timeout 2
expect_exit 1 "$addr" -- "${client[@]}" --id rogue --server-timeout 2 --tls-ca "$pki/ca.pem" \
  --tls-cert "$pki/rogue.pem" --tls-key "$pki/rogue.key" --tls-server-name pare-server
expect_exit 1 "$addr" -- "${client[@]}" --id nocert --server-timeout 2 --tls-ca "$pki/ca.pem" --tls-server-name pare-server
expect_exit 1 "$addr" -- "${client[@]}" --id wrongname --server-timeout 2 --tls-ca "$pki/ca.pem" \
  --tls-cert "$pki/client.pem" --tls-key "$pki/client.key"

"${client[@]}" --id a "${good[@]}" 2>"$work/a.err" &
a=$!
"${client[@]}" --id b "${good[@]}" 2>"$work/b.err" &
b=$!
wait "$a" || fail "client a failed: $(cat "$work/a.err")"
wait "$b" || fail "client b failed: $(cat "$work/b.err")"
wait "$srv" || fail "the TLS server failed: $(cat "$work/srv.err")"
"$PY" - "$work/srv" <<'PYEOF' || fail "the TLS run's round log is wrong"
import json, sys
rounds = [json.loads(l) for l in open(f"{sys.argv[1]}/rounds.jsonl")]
assert [r["round"] for r in rounds] == [1, 2], rounds
for r in rounds:
    assert r["answered"] == ["a", "b"] and r["sampled"] == ["a", "b"], r
PYEOF
[ -f "$work/srv/model.onnx" ] && echo "ok: two TLS clients finished the run" || fail "no model.onnx"

# Bad TLS flags and files: exit 2, naming the flag or the file, before anything is written.
srv_cmd=("$PARE" federate server -m mlp:784-16-10 --clients 1 --rounds 1)
expect_exit 2 "--tls-key is needed with --tls-cert" -- "${srv_cmd[@]}" --dir "$work/bad1" --tls-cert "$pki/server.pem"
expect_exit 2 "--tls-cert is needed with --tls-client-ca" -- "${srv_cmd[@]}" --dir "$work/bad2" --tls-client-ca "$pki/ca.pem"
expect_exit 2 "x.npy' is not a PEM file with a CERTIFICATE" -- "${srv_cmd[@]}" --dir "$work/bad3" \
  --tls-cert "$work/x.npy" --tls-key "$pki/server.key"
expect_exit 2 "cannot open '$pki/missing.pem'" -- "${srv_cmd[@]}" --dir "$work/bad4" \
  --tls-cert "$pki/missing.pem" --tls-key "$pki/server.key"
expect_exit 2 "server.pem' is not a PEM file with a PRIVATE KEY" -- "${srv_cmd[@]}" --dir "$work/bad5" \
  --tls-cert "$pki/server.pem" --tls-key "$pki/server.pem"
for d in bad1 bad2 bad3 bad4 bad5; do [ -e "$work/$d" ] && fail "$d: a refused server left $work/$d"; done
expect_exit 2 "--tls-ca is needed with --tls-cert" -- "${client[@]}" --id c --tls-cert "$pki/client.pem" \
  --tls-key "$pki/client.key"
expect_exit 2 "--tls-ca is needed with --tls-server-name" -- "${client[@]}" --id c --tls-server-name x
finish
