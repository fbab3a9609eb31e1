"""Host lists in Slurm's notation (runs.domain.hostlist): what scontrol show hostlist writes, read back."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.domain.hostlist import expand, fold


@pytest.mark.parametrize(
    ("names", "folded"),
    [
        ([], ""),
        (["gpu-0001"], "gpu-0001"),
        (["gpu-0003", "gpu-0001", "gpu-0002", "gpu-0005", "gpu-0002"], "gpu-[0001-0003,0005]"),
        ([f"gpu-{n:05d}" for n in range(1, 16_385)], "gpu-[00001-16384]"),
        (["n1", "n2", "n10", "n9"], "n[1-2,9-10]"),  # unpadded numbers keep no width
        (["n08", "n09", "n10"], "n[08-10]"),  # n10 is as wide as the padded ones: one range
        (["r01-n02", "r01-n03", "r02-n01"], "r01-n[02-03],r02-n01"),  # the last number is the range
        (["gpu-2", "gpu-10", "login", "a"], "a,gpu-[2,10],login"),  # natural order; no digits, as it is
        (["odd[1]", "odd2"], "odd2,odd[1]"),  # a name with the notation's own characters stays as it is
        (["node1.ib", "node2.ib"], "node[1-2].ib"),  # a suffix after the number
        (["gpu-1329", "gpu-01329"], "gpu-01329,gpu-1329"),  # one number, two names: ordered by the name too
    ],
)
def test_fold_writes_what_slurm_writes(names, folded):
    assert fold(names) == folded


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gpu-[0098-0102]", ["gpu-0098", "gpu-0099", "gpu-0100", "gpu-0101", "gpu-0102"]),
        ("n[1-2,9-10],login", ["n1", "n2", "n9", "n10", "login"]),
        ("node[1-2].ib", ["node1.ib", "node2.ib"]),
        (" a , b ", ["a", "b"]),
    ],
)
def test_expand_reads_it_back(expression, names):
    assert expand(expression) == names


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("gpu-[3-1]", "backwards"),
        ("gpu-[1-", "not closed"),
        ("gpu-[[1]]", "nest"),
        ("gpu-[1-]", "a number or a range"),
        ("gpu-[a-b]", "one bracketed range"),
        ("n[1-99999999]", "more than"),
    ],
)
def test_a_malformed_expression_says_what_is_wrong(expression, reason):
    with pytest.raises(ValueError, match=reason):
        expand(expression)


hostnames = st.builds(
    lambda prefix, number, width, suffix: f"{prefix}{number:0{width}d}{suffix}",
    st.sampled_from(["gpu-", "n", "r01-n", "dgx"]),
    st.integers(0, 3000),
    st.sampled_from([0, 3, 4, 5]),
    st.sampled_from(["", ".ib"]),
) | st.sampled_from(["login", "head-a", "spare"])


@given(st.lists(hostnames, max_size=60))
def test_expanding_a_folded_list_gives_the_same_hosts(names):
    folded = fold(names)
    assert sorted(expand(folded)) == sorted(set(names))
    assert fold(expand(folded)) == folded


def test_a_page_lists_the_hosts_as_named_whatever_their_characters():
    """The page's list comes from the names, never from the folded text read back: odd[x] is not a pattern, a,b is
    one host, and two alerts on one node count one host."""
    from django.template import Context, Template

    names = ["odd[x]", "a,b", "gpu-01", "gpu-02", "gpu-01", "x/y"]
    html = Template("{% load hostlist_tags %}{% hosts names %}").render(Context({"names": names}))
    assert "(5)" in html
    for href in ("/nodes/odd%5Bx%5D", "/nodes/a%2Cb", "/nodes/gpu-01", "/nodes/x%2Fy"):
        assert f'href="{href}"' in html
    assert "gpu-[01-02]" in html
