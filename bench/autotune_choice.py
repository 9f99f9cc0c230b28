"""In one process: call a case's Triton expert once (its autotuner picks a config), then
report the config chosen, the autotuner's timings of every config, and `do_bench` of the
expert's `run()` three times (median, L2 flushed, plain do_bench: no gate).

    python3 bench/autotune_choice.py CASE      # one JSON line; run it in several processes

Used to tell apart two explanations of the expert times that changed from gate to gate
(bench/results/timing/README.md): a different autotuner choice per process, or host time
inside do_bench's measurement of a few-microsecond kernel."""
import importlib.util, json, sys
sys.path.insert(0, '.')
import torch, triton, triton.testing
from triton.runtime.autotuner import Autotuner
from gate.cases import load_case
name = sys.argv[1]
case = load_case(name)
mod_case = case.module()
shape = dict(next(iter(mod_case.SHAPES.values())))
inputs = tuple(mod_case.make_inputs(shape, 1234, 'cuda'))
expert = next(p for p, lang in case.expert_paths() if lang == 'triton')
spec = importlib.util.spec_from_file_location('expert_mod', expert)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.run(*inputs); torch.cuda.synchronize()
tuners = [v for v in vars(m).values() if isinstance(v, Autotuner)]
rec = {"case": name, "run_ms": [triton.testing.do_bench(lambda: m.run(*inputs), return_mode='median') for _ in range(3)]}
for t in tuners:
    rec.setdefault("tuners", []).append({"best": str(t.best_config), "timings": {str(c): [round(x, 4) for x in v] for c, v in (t.configs_timings or {}).items()}})
print(json.dumps(rec))
