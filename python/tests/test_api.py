"""Every public name has a docstring and a type hint in plume/__init__.pyi, the stub
declares nothing the module lacks and gives every function the parameters the code has, the
public names are plume's whatever private module defines them, and the modules import only
those below them."""
import ast
import inspect
import os
import pickle
import unittest

import plume


def stub_names():
    """{name: set of member names} of the classes and functions the .pyi declares."""
    path = os.path.join(os.path.dirname(plume.__file__), "__init__.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            members = set()
            for b in getattr(node, "bases", []):  # the stub's shared close/with base
                if isinstance(b, ast.Name) and b.id == "_Closable":
                    members |= {"close"}
            for m in getattr(node, "body", []):
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                    members.add(m.name)
                elif isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name):
                    members.add(m.target.id)
            out[node.name] = members
    return out


def stub_functions():
    """{"convert": params, "Model.generate": params, ...} of the functions and methods the
    .pyi declares (properties and private names left out, __init__ kept), params as
    param_list gives them."""
    path = os.path.join(os.path.dirname(plume.__file__), "__init__.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        if isinstance(node, ast.FunctionDef):
            out[node.name] = stub_params(node, False)
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if not isinstance(m, ast.FunctionDef):
                    continue
                decos = {d.id for d in m.decorator_list if isinstance(d, ast.Name)}
                if "property" in decos or (m.name.startswith("_") and m.name != "__init__"):
                    continue
                out[node.name + "." + m.name] = stub_params(m, "classmethod" in decos)
    return out


def stub_params(fn, bound):
    """[(name, kind, has a default)] of a stub's def; bound drops the first (a classmethod's
    cls, as getattr on the class gives it)."""
    a = fn.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)
    out = [(p.arg, "positional", i >= first_default) for i, p in enumerate(pos)]
    if a.vararg:
        out.append((a.vararg.arg, "*", False))
    out += [(p.arg, "keyword", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**", False))
    return out[1:] if bound else out


def code_params(obj):
    """[(name, kind, has a default)] of a function of the module, as stub_params."""
    kinds = {inspect.Parameter.POSITIONAL_ONLY: "positional",
             inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.KEYWORD_ONLY: "keyword",
             inspect.Parameter.VAR_KEYWORD: "**"}
    return [(p.name, kinds[p.kind], p.default is not p.empty)
            for p in inspect.signature(obj).parameters.values()]


# The package's modules, each importing only those before it (nothing imports upward, no
# cycles); a new module takes its place here.
LAYERS = ["_lib", "_errors", "_common", "_tokenizer", "_sampler", "_session", "_media", "_generate",
          "_convert", "_model"]


def public_members(cls):
    own = set()
    for k in cls.__mro__:
        if k.__module__ != "plume":
            continue
        own |= {n for n in vars(k) if not n.startswith("_")}
    return own


class TestApi(unittest.TestCase):
    def test_docstrings(self):
        for name in plume.__all__:
            obj = getattr(plume, name)
            if name == "__version__":
                continue
            self.assertTrue(inspect.getdoc(obj), name)
            if inspect.isclass(obj):
                for m in public_members(obj):
                    v = inspect.getattr_static(obj, m)
                    if callable(v) or isinstance(v, (property, classmethod)):
                        self.assertTrue(inspect.getdoc(getattr(obj, m)), "%s.%s" % (name, m))

    def test_stub_matches_module(self):
        stubs = stub_names()
        public = {n for n in plume.__all__ if n != "__version__"}
        self.assertEqual(set(stubs), public)
        for name in public:
            obj = getattr(plume, name)
            if inspect.isclass(obj) and not issubclass(obj, Exception):
                methods = {m for m in public_members(obj)
                           if callable(getattr(obj, m)) or isinstance(getattr(obj, m), property)}
                self.assertLessEqual(methods, stubs[name], name)
                for m in stubs[name]:
                    # attributes set in __init__ (n_vocab, path...) are checked on instances
                    if m not in methods:
                        self.assertIn(m, {"n_vocab", "seed", "path", "n_ctx", "n_layers", "isa",
                                          "n_threads", "weights", "drafter", "close"}, "%s.%s" % (name, m))

    def test_stub_parameters_match_the_code(self):
        stubs = stub_functions()
        self.assertIn("Model.generate", stubs)
        for qual, want in sorted(stubs.items()):
            obj = plume
            for part in qual.split("."):
                obj = getattr(obj, part)
            self.assertEqual(code_params(obj), want, qual)

    def test_public_names_are_plumes(self):
        # defined in private modules, but repr, tracebacks, help() and pickle say plume.X
        for name in plume.__all__:
            if name == "__version__":
                continue
            obj = getattr(plume, name)
            self.assertEqual(obj.__module__, "plume", name)
            self.assertIs(getattr(plume, obj.__qualname__), obj)
        self.assertEqual(repr(plume.RangeError), "<class 'plume.RangeError'>")
        e = pickle.loads(pickle.dumps(plume.RangeError("the context is full", -5)))
        self.assertIs(type(e), plume.RangeError)
        self.assertEqual((str(e), e.code), ("the context is full", -5))

    def test_modules_import_only_those_below(self):
        here = os.path.dirname(plume.__file__)
        mods = sorted(f[:-3] for f in os.listdir(here) if f.endswith(".py"))
        self.assertEqual(mods, sorted(LAYERS + ["__init__"]))
        for i, mod in enumerate(LAYERS):
            with open(os.path.join(here, mod + ".py")) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 1:
                    used = [node.module] if node.module else [a.name for a in node.names]
                    for u in used:
                        self.assertIn(u, LAYERS[:i], "%s imports %s" % (mod, u))
                elif isinstance(node, ast.ImportFrom):
                    self.assertNotEqual(node.module, "plume", mod)
                elif isinstance(node, ast.Import):
                    self.assertFalse(any(a.name.split(".")[0] == "plume" for a in node.names),
                                     mod)


if __name__ == "__main__":
    unittest.main()
