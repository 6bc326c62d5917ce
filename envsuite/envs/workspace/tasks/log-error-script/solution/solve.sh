#!/bin/bash
set -euo pipefail
cat > /app/errors.sh <<'SH'
#!/bin/bash
awk '$2 == "ERROR" {print $3}' "$1" | sort | uniq -c | awk '{print $2, $1}' | sort -k2,2nr -k1,1
SH
chmod +x /app/errors.sh
