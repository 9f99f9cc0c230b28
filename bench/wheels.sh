# Sourced by the device scripts: Python packages missing on the GPU machine are installed from
# the wheels in .whl/ into /tmp/site, and PYTHONPATH is set to them and the repository.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
