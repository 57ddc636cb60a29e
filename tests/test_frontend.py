"""tirender/frontend.py: the cheaper error snippets and memoised source lookups keep Taichi's
compile errors pointing at the file, line and code."""
import inspect

import pytest
import taichi as ti
from taichi.lang import kernel_impl
from taichi.lang.ast import ast_transformer_utils

from tirender import frontend


def test_installed_on_this_taichi():
    assert frontend.install()
    assert ast_transformer_utils.ASTTransformerContext.get_pos_info is frontend._pos_info
    assert kernel_impl.getsourcelines.__wrapped__ is not None


def test_memoised_lookups_match_inspect():
    def probe(x):
        return x + 1
    lines, start = kernel_impl.getsourcelines(probe)
    assert (lines, start) == inspect.getsourcelines(probe)
    assert kernel_impl.getsourcelines(probe) is kernel_impl.getsourcelines(probe)   # remembered
    assert kernel_impl.getsourcefile(probe) == inspect.getsourcefile(probe)


def test_compile_error_names_file_line_and_code():
    @ti.func
    def helper(x):
        return x * undefined_name_xyz  # noqa: F821

    @ti.kernel
    def broken() -> ti.f32:
        return helper(2.0)

    with pytest.raises(ti.TaichiCompilationError) as e:
        broken()
    msg = str(e.value)
    line = inspect.getsourcelines(helper)[1] + 2
    assert f'test_frontend.py", line {line}, in helper' in msg, msg
    assert "return x * undefined_name_xyz" in msg, msg
    assert "^" in msg and 'Name "undefined_name_xyz" is not defined' in msg, msg


def test_remembered_text_cleanup_matches_textwrap():
    import textwrap
    tw = kernel_impl.textwrap
    assert isinstance(tw, frontend._Textwrap)
    for line in ("\tx = 1  # tab\n", "    y = f(a, b)\n", "z" * 200 + "\n", ""):
        assert tw.fill(line, tabsize=4, width=9999) == textwrap.fill(line, tabsize=4, width=9999)
        assert tw.fill(line, tabsize=4, width=9999) is tw.fill(line, tabsize=4, width=9999)
    src = "    def f(x):\n        return x\n"
    assert tw.dedent(src) == textwrap.dedent(src)
    assert tw.wrap is textwrap.wrap
