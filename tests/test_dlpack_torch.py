"""torch tensors in place: torch's rules for an in-place write (those of
t.zero_()), its version counters, every dtype, clear_pages of them.  Skipped
where torch is not installed."""

from __future__ import annotations

import pytest
from conftest import run_child

import clearpages as cp


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed "
                               "(pip install 'torch==2.13.0+cpu' runs these)")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool", "complex64"])
@pytest.mark.parametrize("n", [1024, 1 << 18])       # kept GIL; released (exported)
def test_torch_tensor_is_cleared_in_place_and_autograd_is_told(torch, dtype, n):
    t = torch.ones(n, dtype=getattr(torch, dtype))
    v = t._version
    ptr = t.data_ptr()
    cp.clear(t)
    assert not t.any() and t.data_ptr() == ptr
    assert t._version > v


@pytest.mark.parametrize("view", [
    pytest.param(lambda t: t[3:], id="offset"),
    pytest.param(lambda t: t[::2, 1:9], id="strided"),
    pytest.param(lambda t: t.T, id="transposed"),
    pytest.param(lambda t: t[:, 5], id="column"),
    pytest.param(lambda t: t.as_strided((5, 1, 10), (10, 77, 1), 30), id="unit-dim"),
    pytest.param(lambda t: t[4, 4], id="0-dim"),
    pytest.param(lambda t: t[:0], id="empty"),
    pytest.param(lambda t: t[2:4].unsqueeze(0), id="unsqueezed"),
])
def test_torch_views_are_honoured(torch, view):
    t = torch.arange(1, 101, dtype=torch.bfloat16).reshape(10, 10)
    expect = t.clone()
    view(expect).zero_()
    cp.clear(view(t))
    assert torch.equal(t, expect)


# torch's rules for an in-place write, each checked against t.zero_() on a
# twin of the same tensor: (make the tensor of n elements and the leaf
# behind it, the mode the write is made in).


def _leaf(torch, n, **kw):
    w = torch.ones(n, **kw)
    return w, w


def _parameter(torch, n):
    p = torch.nn.Parameter(torch.ones(n))
    return p, p


def _result(torch, n):
    w = torch.ones(n, requires_grad=True)
    return w * 2, w                     # not a leaf; requires grad


def _computed(torch, n):
    x = torch.ones(n)
    return x * 2, None                  # computed, no grad: a leaf to autograd


def _view_of_leaf(torch, n):
    w = torch.ones(n + 1, requires_grad=True)
    return w[1:], w


def _view_of_result(torch, n):
    w = torch.ones(n + 1, requires_grad=True)
    return (w * 2)[1:], w


def _inference(torch, n):
    with torch.inference_mode():
        return torch.ones(n), None


def _given_inference_data(torch, n=6):
    t, _ = _inference(torch, n)
    u = torch.ones(n)
    u.data = t                  # is_inference() now, but it keeps its version counter
    return u, None


TORCH_RULES = {
    "leaf without grad": (_leaf, "grad"),
    "leaf with grad": (lambda torch, n: _leaf(torch, n, requires_grad=True), "grad"),
    "leaf with grad, no_grad": (lambda torch, n: _leaf(torch, n, requires_grad=True),
                                "no_grad"),
    "parameter": (_parameter, "grad"),
    "parameter, no_grad": (_parameter, "no_grad"),
    "not a leaf, with grad": (_result, "grad"),
    "not a leaf, with grad, no_grad": (_result, "no_grad"),
    "computed without grad": (_computed, "grad"),
    "view of a leaf with grad": (_view_of_leaf, "grad"),
    "view of a leaf with grad, no_grad": (_view_of_leaf, "no_grad"),
    "view of a result with grad": (_view_of_result, "grad"),
    "inference tensor, outside": (_inference, "grad"),
    "inference tensor, inside": (_inference, "inference"),
}


def _mode(torch, name):
    import contextlib
    return {"grad": contextlib.nullcontext(), "no_grad": torch.no_grad(),
            "inference": torch.inference_mode()}[name]


def _every_page(t):
    return cp.clear_pages(t, range(-(-t.numel() * t.element_size() // 4096)))


@pytest.mark.parametrize("write", [cp.clear, _every_page], ids=["clear", "clear_pages"])
@pytest.mark.parametrize("n", [6, 1 << 15], ids=["24B", "128KiB"])   # read in place; exported
@pytest.mark.parametrize("rule", TORCH_RULES)
def test_torch_rules_are_those_of_zero_(torch, rule, n, write):
    """cp.clear and clear_pages take or refuse what t.zero_() takes or
    refuses; where they take it, the values, the version counter and the
    gradients that follow are the same as after zero_().  One exception:
    a tensor whose writes autograd records is cleared by its own zero_(),
    and clear_pages refuses it (autograd has no record for some pages)."""
    make, mode = TORCH_RULES[rule]
    outcome = []
    recorded = False
    for clear in (lambda t: t.zero_(), write):
        t, w = make(torch, n)
        try:
            before = t._version
        except RuntimeError:            # an inference tensor has no version counter
            before = None
        with _mode(torch, mode):
            recorded = t.requires_grad and not t.is_leaf and torch.is_grad_enabled()
            try:
                clear(t)
                err = None
            except (RuntimeError, TypeError) as e:
                err = e
        grad = None
        if err is None and w is not None and t.requires_grad:
            (t * torch.arange(t.numel())).sum().backward()
            grad = w.grad.tolist()
        values = t.detach().tolist()
        bumped = None if before is None else t._version - before
        outcome.append((err, values, bumped, grad))
    (theirs, *torch_state), (ours, *our_state) = outcome
    refused = theirs is not None or (recorded and write is _every_page)
    assert refused == (ours is not None), "t.zero_(): %r; ours: %r" % (theirs, ours)
    if ours is not None:
        assert isinstance(ours, TypeError) and "left unchanged" in str(ours)
        assert "  " not in str(ours)                # one space between sentences
        assert our_state[0] == make(torch, n)[0].detach().tolist()     # unchanged
        assert our_state[1] in (0, None)            # no write, no bump
    else:
        assert our_state == torch_state


def test_a_tensor_given_an_inference_tensors_data_is_taken_as_by_zero_(torch):
    """is_inference() says yes, but the tensor kept its version counter,
    and torch's in-place rule asks the counter: zero_() takes it, so
    cp.clear does.  (torch's version bump skips it; zero_() bumps it.)"""
    a, _ = _given_inference_data(torch)
    b, _ = _given_inference_data(torch)
    assert a.is_inference()
    a.zero_()
    cp.clear(b)
    assert a.tolist() == b.tolist() == [0.0] * 6


def test_a_tensor_that_requires_grad_says_what_to_do(torch):
    w = torch.ones(8, requires_grad=True)
    with pytest.raises(TypeError, match=r"a leaf that requires grad.*torch.no_grad.*t.detach"):
        cp.clear(w)
    with pytest.raises(TypeError, match=r"a view of a leaf that requires grad"):
        cp.clear(w[2:])
    with pytest.raises(TypeError, match=r"a leaf that requires grad"):
        cp.clear_many([bytearray(4), w])
    with torch.inference_mode():
        i = torch.ones(4)
    with pytest.raises(TypeError, match=r"inference tensor.*inside torch.inference_mode"):
        cp.clear(i)
    assert w.detach().all() and i.all()


def test_a_result_that_requires_grad_is_cleared_by_its_zero_(torch):
    """autograd records zero_() of a result in the graph (its gradient
    is then zero); in clear_many it runs after the others are written, so a
    refusal among them leaves it unchanged too."""
    w = torch.ones(4, requires_grad=True)
    y = w * 3
    buf = bytearray(b"\x01" * 8)
    with pytest.raises(TypeError, match="buffer 2"):
        cp.clear_many([y, buf, w])
    assert y.detach().all() and any(buf)
    cp.clear_many([y, buf])
    assert not y.detach().any() and not any(buf)
    assert y.grad_fn.name() == "ZeroBackward0"
    y.sum().backward()
    assert w.grad.tolist() == [0.0] * 4
    with pytest.raises(TypeError, match=r"not a leaf.*pages"):
        cp.clear_pages(w * 2, [0])


def test_version_counters_move_as_with_zero_(torch):
    base = torch.ones(4096, dtype=torch.float32)
    v = base._version
    cp.clear(base[10:20])                          # a view shares its base's counter
    assert base._version == v + 1
    cp.clear_many([base[:5], base[5:]])            # each tensor once
    assert base._version == v + 3
    d = base.detach()
    cp.clear(d)
    assert base._version == v + 4
    cp.clear_pages(base, [0])
    assert base._version == v + 5
    cp.clear_pages(base, [])                       # nothing written
    assert base._version == v + 5


def test_autograd_sees_the_write(torch):
    x = torch.ones(4)
    w = torch.ones(4, requires_grad=True)
    y = (x * w).sum()                             # x is saved for w's gradient
    cp.clear(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    d = torch.ones(4, requires_grad=True)
    cp.clear(d.detach())                           # shares the version counter
    assert d._version == 1


def test_parameters_subclasses_and_inference_tensors(torch):
    p = torch.nn.Parameter(torch.ones(16))
    with torch.no_grad():
        cp.clear(p)
    assert not p.detach().any()

    class Sub(torch.Tensor):
        pass

    s = torch.ones(16).as_subclass(Sub)
    cp.clear(s)
    assert not s.any()
    with torch.inference_mode():
        i = torch.ones(16)
        cp.clear(i)
    assert not i.any()


def test_torch_expand_to_2_61_elements_and_a_zero_tensor(torch):
    """The two tensors that once crashed every entry: an expanded one
    element, and torch's ZeroTensor (no memory behind its 16 bytes)."""
    run_child("""
import torch
one = torch.zeros(1, dtype=torch.uint8)
t = one.expand(1 << 61)
assert cp.is_zero(t) is True
one[0] = 7
assert cp.is_zero(t) is False and list(cp.nonzero_pages(t)) == [0]
cp.clear(t)
assert one.item() == 0
one[0] = 7
cp.clear_many([t, t])
assert one.item() == 0
z = torch._efficientzerotensor(4)
for call in (cp.clear, cp.is_zero, cp.nonzero_pages, lambda t: cp.clear_many([t])):
    try:
        call(z)
    except TypeError as e:
        assert "ZeroTensors are immutable" in str(e), e
    else:
        raise AssertionError("a ZeroTensor was taken by %r" % call)
try:
    z.zero_()
except RuntimeError as e:
    assert "ZeroTensors are immutable" in str(e), e       # torch's own words
""")


def test_torch_tensors_cp_cannot_write_are_refused(torch):
    m = torch.ones(4, device="meta")
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(m)
    s = torch.ones(4).to_sparse()
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(s)
    assert s.to_dense().all()


def _torch_dtypes(torch):
    """Every dtype torch makes a CPU tensor of, by name."""
    import warnings

    out = {}
    for name in dir(torch):
        d = getattr(torch, name)
        if isinstance(d, torch.dtype):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")     # "experimental", "deprecated"
                    torch.zeros(2, dtype=d)
            except (RuntimeError, TypeError):
                continue                                # quantized: no plain tensor
            out[str(d).replace("torch.", "")] = d
    return out


def test_clear_pages_of_nonzero_pages_for_every_torch_dtype(torch):
    """The KV-cache case: find the pages in use, clear them, for a tensor of
    any dtype (the bits types, which DLPack cannot carry, as their bytes)."""
    dtypes = _torch_dtypes(torch)
    assert {"float32", "bfloat16", "float8_e4m3fn", "bits8", "complex64"} <= set(dtypes)
    for name, dtype in sorted(dtypes.items()):
        t = torch.zeros(20000 // torch.empty(0, dtype=dtype).element_size(), dtype=dtype)
        raw = t.view(torch.uint8)
        raw[[5, 3 * 4096, 4 * 4096 - 1]] = 1
        pages = cp.nonzero_pages(t)
        assert list(pages) == [0, 3], name
        v = t._version
        cp.clear_pages(t, pages)
        assert cp.is_zero(t) and not raw.any() and t._version == v + 1, name
        raw[7] = 1
        cp.clear(t)
        assert not raw.any(), name


def test_clear_pages_reads_the_tensor_after_the_page_indices(torch):
    """An index's __index__ may move the tensor's memory (resize_): the
    tensor is read after the indices, so the pages of its memory as it is
    then are cleared, never the memory it had before."""
    t = torch.ones(4096, dtype=torch.uint8)

    class Index:
        def __index__(self):
            t.resize_(1 << 16)          # a new storage; the old one is freed
            t.fill_(1)
            return 1

    cp.clear_pages(t, [Index()])
    assert not t[4096:8192].any() and t[:4096].all() and t[8192:].all()


def test_torch_tensors_in_clear_many_and_nonzero_pages(torch):
    x = torch.ones(64, 64)
    y = torch.ones(3000, dtype=torch.int16)
    v = x._version
    cp.clear_many([x[:, :5], y, bytearray(3)])
    assert not x[:, :5].any() and x[:, 5:].all() and not y.any()
    assert x._version == v + 1
    y[2048] = 1
    assert list(cp.nonzero_pages(y)) == [1]
