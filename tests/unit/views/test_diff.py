"""deepctx diff on two profiles with known differences: statuses and values per call path and kernel."""

from __future__ import annotations

from synth import gpu_profile

from deepctx.cli.main import main
from deepctx.cli.views.diff import diff_tree, kernel_changes, kernel_metric, path_changes
from deepctx.profiles.tree import from_doc


def pair(source: str) -> tuple[dict, dict]:
    before = gpu_profile(source, mul_calls=1000, item_calls=50, cpu_in_main=30)
    after = gpu_profile(source, mul_calls=1500, item_calls=50, extra_kernel=True, cpu_in_main=10)
    # The copy's call path vanished in the after profile.
    item = after["root"]["children"][0]["children"][0]["children"][1]["children"][0]
    item["children"] = [c for c in item["children"] if c["name"] != "cudaMemcpyAsync"]
    return before, after


def test_kernels_grew_appeared_and_vanished(source_file) -> None:
    before, after = pair(str(source_file))
    root = diff_tree(from_doc(before), from_doc(after))
    assert kernel_metric(root) == "gpu_time_ns"
    ch = {(k.frame.kind, k.frame.name): k for k in kernel_changes(root)}
    mul = ch[("kernel", "vectorized_elementwise_kernel")]
    assert (mul.before["calls"], mul.after["calls"], mul.delta("gpu_time_ns"), mul.status("gpu_time_ns")) == (
        1000, 1500, 1_000_000, "grew")
    assert ch[("kernel", "fused_gelu_kernel")].status("gpu_time_ns") == "appeared"
    assert ch[("memcpy", "DtoH")].status("gpu_time_ns") == "vanished"
    assert ch[("sync", "stream")].status("calls") == "same"
    assert list(ch)[0] == ("kernel", "vectorized_elementwise_kernel")  # largest change first


def test_call_paths_by_self_value(source_file) -> None:
    before, after = pair(str(source_file))
    root = diff_tree(from_doc(before), from_doc(after))
    cpu = path_changes(root, "cpu_samples")
    assert [(c.path[-1].name, c.before, c.after, c.status) for c in cpu] == [("main", 30, 10, "shrank")]
    calls = {c.path[-1].name: c for c in path_changes(root, "calls")}
    assert calls["vectorized_elementwise_kernel"].delta == 500
    assert calls["fused_gelu_kernel"].status == "appeared" and calls["DtoH"].status == "vanished"
    assert root.before_total["calls"] == 1100 and root.after_total["calls"] == 1500 + 10 + 50


def test_identical_profiles_have_no_changes(torch_doc) -> None:
    root = diff_tree(from_doc(torch_doc), from_doc(torch_doc))
    assert path_changes(root, "calls") == [] and all(k.status("api_time_ns") == "same" for k in kernel_changes(root))
    assert root.after_total == root.before_total  # threads of one name merged, nothing lost


def test_diff_command_in_the_terminal_and_html(tmp_path, source_file, capsys) -> None:
    import json

    before, after = pair(str(source_file))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(before))
    b.write_text(json.dumps(after))
    assert main(["diff", str(a), str(b), "--color", "never", "--width", "160"]) == 0
    out = capsys.readouterr().out
    grew = next(line for line in out.splitlines() if line.rstrip().endswith(" vectorized_elementwise_kernel") and "grew" in line)
    assert grew.split()[:6] == ["grew", "1000", "1500", "2.00", "ms", "3.00"]
    assert any(line.startswith("appeared") and "fused_gelu_kernel" in line for line in out.splitlines())
    assert any(line.startswith("vanished") and "DtoH  [memcpy]" in line for line in out.splitlines())
    # main's 30 of 47 samples against 10 of 27: too few samples to tell from noise (test_diff_significance.py)
    assert "functions by self CPU samples" in out and "(0 significant, 1 within sampling noise" in out
    assert main(["diff", str(a), str(b), "--color", "never", "--width", "160", "--by", "path", "--show-noise"]) == 0
    out = capsys.readouterr().out
    noise = next(line for line in out.splitlines() if line.startswith("noise"))
    assert noise.split()[1:4] == ["63.83", "37.04", "-26.79"] and "main" in noise
    html = tmp_path / "d.html"
    assert main(["diff", str(a), str(b), "--html", str(html)]) == 0
    text = html.read_text()
    assert '"mode":"diff"' in text and "fused_gelu_kernel" in text
