# Sourced by the packaging scripts: reads `--torch debian|pip` (or ROUTELAB_TORCH) out of the arguments into
# $routelab_torch and leaves the rest in $routelab_args. debian (the default) is Debian 12's LibTorch 1.13 (CPU);
# pip is the version pinned in packaging/requirements-torch.txt (CUDA), in the venv $routelab_venv.
routelab_torch="${ROUTELAB_TORCH:-debian}"
routelab_args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --torch) routelab_torch="${2:-}"; shift 2 || { echo "routelab: --torch needs debian or pip" >&2; exit 2; } ;;
    --torch=*) routelab_torch="${1#--torch=}"; shift ;;
    *) routelab_args+=("$1"); shift ;;
  esac
done
case "$routelab_torch" in
  debian|pip) ;;
  *) echo "routelab: --torch '$routelab_torch' (expected debian or pip)" >&2; exit 2 ;;
esac
routelab_venv="${ROUTELAB_VENV:-$root/.venv-torch}"
