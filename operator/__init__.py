"""railtrain.operator: the kopf operator that turns TrainingJobs into placed gangs of pods.

The project layout puts this package in a top-level folder named ``operator``,
which is also the name of a standard-library module. When the repository root
is on ``sys.path`` (``python -m ...`` run from the checkout), ``import operator``
would find this folder instead of the standard library and break Python
itself. The block below makes that import load the standard-library module, so
tools work from the repository root; the package is always imported as
``railtrain.operator``.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

if __name__ == "operator":  # imported under the standard-library name: hand over to it
    import os as _os
    import sys as _sys
    from importlib.machinery import SourceFileLoader as _Loader  # frozen; imports nothing that needs operator

    _path = _os.path.join(_os.path.dirname(_os.__file__), "operator.py")
    _stdlib = type(_sys)("operator")
    _stdlib.__file__ = _path
    _stdlib.__loader__ = _Loader("operator", _path)
    _sys.modules["operator"] = _stdlib
    _stdlib.__loader__.exec_module(_stdlib)
    globals().update({k: v for k, v in vars(_stdlib).items() if not k.startswith("__")})
