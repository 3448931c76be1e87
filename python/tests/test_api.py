"""Every public name has a docstring and a type hint in plume/__init__.pyi, and the stub
declares nothing the module lacks."""
import ast
import inspect
import os
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
                                          "n_threads", "weights", "close"}, "%s.%s" % (name, m))


if __name__ == "__main__":
    unittest.main()
