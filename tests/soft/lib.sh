# Shared by the soft-fabric test scripts.

. "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"   # wait_output, wait_port
