"""The renamed modules' old names still import, give the same objects and say the new name (issue 36):
ctransformer.training is ctransformer.annotated, ctransformer.translation is ctransformer.translator."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("old, new, name", [("training", "annotated", "subsequent_mask"),
                                            ("translation", "translator", "Translator")])
def test_old_module_name_warns_and_aliases(old, new, name):
    # A fresh interpreter: the warning comes with the old module's first import, which this one may have had.
    code = (f"import warnings\nwarnings.simplefilter('error', FutureWarning)\nimport ctransformer.{new} as new\n"
            f"try:\n    import ctransformer.{old}\nexcept FutureWarning as w:\n    print('warned:', w)\n"
            f"warnings.simplefilter('ignore', FutureWarning)\nimport ctransformer.{old} as old\n"
            f"assert old.{name} is new.{name} and old.__all__ == new.__all__\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"warned: ctransformer.{old} is now ctransformer.{new}" in run.stdout


def test_ct_training_attribute_still_reaches_the_module():
    code = ("import warnings\nimport ctransformer as ct\nwith warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n    mask = ct.training.subsequent_mask(3)\n"
            "assert mask.shape == (1, 3, 3) and any('ct' in str(w.message) for w in caught)\n"
            "assert not hasattr(ct, 'no_such_name')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_modules_are_reached_as_attributes_after_import_ctransformer():
    """ct.translator, ct.translate, ct.serve, ct.checkpoint, ct.data and ct.tasks are attributes of the package, as
    ct.decode and ct.export are, each imported when first used (a fresh interpreter: none was imported before);
    decode's own imports do not leak into its namespace."""
    code = ("import sys\nimport ctransformer as ct\nassert 'ctransformer.serve' not in sys.modules\n"
            "assert ct.translator.Translator is ct.translate.Translator\n"
            "assert ct.serve.AsyncEngine.__name__ == 'AsyncEngine' and ct.checkpoint.save_checkpoint\n"
            "assert ct.data.CharDataset and ct.tasks.TASKS\n"
            "assert not hasattr(ct.decode, 'contextlib') and not hasattr(ct.decode, 'numbers')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
