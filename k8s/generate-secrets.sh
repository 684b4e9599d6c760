#!/usr/bin/env bash
# Write the inputs of the Secrets that `kubectl apply -k k8s/` generates (k8s/base/secrets/*.env,
# ignored by git): random Redis and PostgreSQL passwords, versitygw keys, and one API token for
# TENANT. The Secret keeps only the token's sha256 hash; the token itself is printed once, here.
# Refuses to overwrite existing files: delete them to rotate (then re-apply and restart the pods).
# Usage: k8s/generate-secrets.sh [TENANT]     (default tenant: default; PDFQUEUE_SECRETS_DIR
#        writes elsewhere, e.g. into a copy of k8s/)
set -euo pipefail
dir="${PDFQUEUE_SECRETS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/base/secrets}"
tenant="${1:-default}"
[[ "$tenant" =~ ^[A-Za-z0-9_.-]{1,64}$ ]] || { echo "generate-secrets: tenant must match [A-Za-z0-9_.-]{1,64}" >&2; exit 2; }
mkdir -p "$dir"
for f in api-tokens redis postgresql s3; do
  if [ -e "$dir/$f.env" ]; then
    echo "generate-secrets: $dir/$f.env exists; delete the *.env files there to make new ones" >&2
    exit 1
  fi
done

# 32 random bytes as 64 hex digits: URL-safe, as the bundled services' passwords must be.
random_hex() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }

umask 077
token="$(random_hex)"
hash="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
printf 'api-tokens=%s:sha256:%s\n' "$tenant" "$hash" >"$dir/api-tokens.env"
printf 'redis-password=%s\n' "$(random_hex)" >"$dir/redis.env"
printf 'postgres-password=%s\n' "$(random_hex)" >"$dir/postgresql.env"
printf 'access-key-id=%s\nsecret-access-key=%s\n' "$(random_hex | cut -c1-20)" "$(random_hex)" >"$dir/s3.env"
echo "generate-secrets: wrote $dir/{api-tokens,redis,postgresql,s3}.env" >&2
echo "API token of tenant $tenant (shown once; the Secret holds only its hash):" >&2
echo "$token"
