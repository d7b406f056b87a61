"""pytorch/pytorch#161889: a torch.compile'd f inside selective activation checkpointing (SAC) runs eagerly on torch 2.5
to 2.9; fixed in 2.10.0. The report's code (edits marked), then what ran: exit 0 compiled, 1 reproduced, 125 unknown."""
import atexit, builtins, contextlib, inspect, io, logging, os, re, sys, traceback, types  # [added] what ran, errors
(log := logging.getLogger("torch._dynamo.convert_frame")).addHandler(logging.StreamHandler(dynamo_log := io.StringIO()))
log.propagate = log.setLevel(logging.DEBUG) or bool(os.environ.get("TORCH_LOGS"))  # Dynamo's skip reasons: debug
def tell(line, code):  # the answer's one line: a closed or full stdout loses the line, never the exit code
    with contextlib.suppress(AttributeError, OSError, ValueError):
        print("f_compiled under SAC: " + line, flush=atexit.unregister(answer_error) or True)  # answered: exit as is
    return code
def answer(error=None):  # prints one line; returns 0 (not reproduced), 1 (reproduced) or 125
    on = "torch %s, git %.8s" % (getattr(torch, "__version__", "?"), getattr(getattr(torch, "version", None),
                                 "git_version", "?")) if (torch := sys.modules.get("torch")) else "torch did not import"
    with contextlib.suppress(AttributeError, OSError, TypeError):  # no SAC modes, or no source on disk: nothing to say
        modes = torch.utils.checkpoint._CachingTorchDispatchMode, torch.utils.checkpoint._CachedTorchDispatchMode
        shipped = all("def ignore_compile_internals" in inspect.getsource(m) for m in modes)  # in torch's own file
        on += "; the 2.10 fix reverted in-process" * (shipped and not all(m.ignore_compile_internals() for m in modes))
    if error is not None and not (re.search(r"^\s*- f \(", str(error), re.M) and any(  # Dynamo refused f under SAC
            fr.f_code.co_name == "checkpoint_fn_with_context" for fr, _ in traceback.walk_tb(error.__traceback__))):
        return tell("cannot tell (%s: %.200s; %s)" % (type(error).__name__, " ".join(str(error).split()), on), 125)
    def ran(call):  # (compiled code ran: Dynamo's or AOTAutograd's region, f's own eager ops ran, the call raised)
        with torch.profiler.profile() as prof, (contextlib.suppress if error else contextlib.nullcontext)(Exception):
            raised = True  # after the loop's refusal (fullgraph, 2.12+), Dynamo raises again once f ran under SAC
            call()
            raised = False
        names = {e.name for e in prof.events()}
        compiled = any(n.startswith(("Torch-Compiled Region", "CompiledFunction")) for n in names)
        return compiled, {"aten::mul", "aten::add"} <= names, raised
    f_control = torch.compile(types.FunctionType(f.__code__.replace(), globals()), fullgraph=True, dynamic=True)
    checkpoint_fn_without_context(f_control, x, y)  # compiles, out of the profile: tracing runs f's ops too
    if ran(lambda: checkpoint_fn_without_context(f_control, x, y)) != (True, False, False):  # fresh code: a skip sticks
        return tell("cannot tell (the control, without SAC, did not run compiled code alone; %s)" % on, 125)
    compiled, eager, raised = ran(lambda: checkpoint_fn_with_context(f_compiled, x, y))
    if compiled == eager and not raised or compiled and raised or error and not raised:
        return tell("cannot tell (compiled code ran: %s, aten::mul and add ran: %s%s; %s)" % (compiled, eager,
                    ", then raised" if raised else ", without the loop's error" if error else "", on), 125)
    said = ["; Dynamo skipped f: %s%s" % m for m in re.findall(r"^\s*(?:- f \(.*:\d+\): (.*)|skipping: f \(reason: "
            r"(.*?), file: .*)$", str(error or dynamo_log.getvalue()), re.M)][:1]  # 2.12+: the error; before: the log
    return tell("ran %s%s (pytorch/pytorch#161889 %s; %s)%s" % ("compiled code" if compiled else
        "eagerly: aten::mul, aten::add" if eager else "no compiled code", ", then raised" * raised,
        "does not reproduce" if compiled else "reproduces", on, "".join(said)), 0 if compiled else 1)
def answer_error(kind, error, tb=None, shell=None):  # never Python's exit 1 for an error: 1 reads as "reproduces"
    try:
        (shell.showtraceback if shell else lambda exc: sys.__excepthook__(*exc))((kind, error, tb))  # (IPython's)
        code = 130 if issubclass(kind, KeyboardInterrupt) else answer(error)  # answer(): 125 for all but Dynamo's
    except BaseException as e:  # no answer could be formed (a torch that breaks as it is read): cannot tell
        code = 130 if isinstance(e, KeyboardInterrupt) or issubclass(kind, KeyboardInterrupt) else 125
    shell.set_custom_exc((), None) if shell else os._exit(code)  # a notebook's kernel goes on (to other cells' errors)
if cell := __name__ == "__main__" and hasattr(builtins, "get_ipython"):  # pasted into a notebook's (IPython's) cell:
    get_ipython().set_custom_exc((BaseException,), lambda ip, *e, **_: answer_error(*e, ip))  # its error, then answered
elif __name__ == "__main__" and ("__file__" in globals() or sys.argv[0] == "-c"):  # a program, not a REPL's paste
    if sys.argv[1:]:  # a usage error: 128 aborts a bisect
        sys.exit(print("takes no options; in the bundle's folder: python3 -m sac_repro --help", file=sys.stderr) or 128)
    sys.excepthook = atexit.register(answer_error, SystemExit, SystemExit("exiting unanswered"))  # SystemExit: no hook
# ==== the report's code (pytorch/pytorch#161889) ====
import functools

import torch
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts

device = "cuda" if torch.cuda.is_available() else "cpu"  # [added] the report hard-codes device="cuda"
nvtx = torch.cuda.nvtx if torch.version.cuda else types.SimpleNamespace(range_push=lambda m: 0, range_pop=lambda: 0)

# Define which operations to save during checkpointing
ops_to_save = [
    torch.ops.aten.mm.default,
]

# Define the policy for checkpointing
def policy_fn(ctx, op, *args, **kwargs):
    if op in ops_to_save:
        return CheckpointPolicy.MUST_SAVE
    else:
        return CheckpointPolicy.PREFER_RECOMPUTE

# Create the context function for selective checkpointing
context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)

# Define a checkpointing function with the context
def checkpoint_fn_with_context(fn, *args, **kwargs):
    return checkpoint(fn, *args, **kwargs, use_reentrant=False, context_fn=context_fn)

# Define a checkpointing function without the context
def checkpoint_fn_without_context(fn, *args, **kwargs):
    return checkpoint(fn, *args, **kwargs, use_reentrant=False)

# Define the function to be compiled
def f(x, y):
    x = 3 * x + 1
    y = 2 * y + 1
    return x @ y

# Create the input tensors
x = torch.ones(10, 12, device=device, requires_grad=True)  # [changed] device="cuda"
y = torch.ones(12, 10, device=device, requires_grad=True)  # [changed] device="cuda"

# Compile the function
f_compiled = torch.compile(f, fullgraph=True, dynamic=True)

checkpoint_fn_without_context(f_compiled, x, y)  # [added] compile before any call under SAC (a skip there sticks to f)
if device == "cuda":  # [added] open the range that nsys --capture-range waits for
    torch.cuda.profiler.start()

# Profile the function calls
for i in range(50):
    nvtx.range_push(f"f_compiled_without_context {i}")  # [changed] torch.cuda.nvtx
    checkpoint_fn_without_context(f_compiled, x, y)
    nvtx.range_pop()  # [changed] torch.cuda.nvtx

for i in range(50):
    nvtx.range_push(f"f_compiled_with_context {i}")  # [changed] torch.cuda.nvtx
    checkpoint_fn_with_context(f_compiled, x, y)
    nvtx.range_pop()  # [changed] torch.cuda.nvtx

if device == "cuda":  # [added] close the capture range
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
# ==== end of the report's code ====
if __name__ == "__main__":
    code = answer()  # in a cell no SystemExit to show, and the cell's errors are IPython's alone again
    get_ipython().set_custom_exc((), None) if cell else sys.exit(code)
