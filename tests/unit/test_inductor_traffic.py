"""The least bytes of each Triton launch in Inductor's wrapper modules (host/inductor_traffic.py), on the wrappers
recorded on the H100 (tests/fixtures/torch_compile/: a Linear-ReLU-Linear model's forward and backward), each
figure worked out by hand from the module's shapes and the kernel's signature."""

from __future__ import annotations

from compiled_fixtures import RecordedWrapper

from deepctx.host.inductor_traffic import kernel_pointers, launch_traffic

FORWARD = RecordedWrapper("cdlu5sxvizxhfj5ccbcng76aoujrpgsc2zv4dn37xgooawdr5lmp.py")
BACKWARD = RecordedWrapper("cxt3lqcj7v6vwbzxhcgoytsmr6vqosuchim3pedwbuodrsfrh6uf.py")
F32 = 4


def test_forward_launches() -> None:
    assert kernel_pointers(FORWARD.read_text())["triton_poi_fused_add_addmm_mul_relu_threshold_backward_0"] == [
        ("in_ptr0", 4), ("in_ptr1", 4), ("out_ptr0", 4), ("out_ptr1", 1), ("xnumel", 0), ("XBLOCK", 0)]
    assert launch_traffic(FORWARD.read_text()) == {
        # bias (256) and mm's output buf0 (64 x 256) read; buf1 (64 x 256 f32) and buf6 (64 x 256 bool) written
        233: 256 * F32 + 64 * 256 * F32 + 64 * 256 * F32 + 64 * 256 * 1,
        # buf2 (buf0 reused: 64 x 256) read, buf4 (2) written
        242: 64 * 256 * F32 + 2 * F32,
        # buf7 (buf5 reused: a 0-d tensor) read and written, buf4 (2) read
        247: 2 * F32 + 2 * F32,
    }


def test_backward_launches_follow_graph_inputs_through_reuse() -> None:
    assert launch_traffic(BACKWARD.read_text()) == {
        # buf0 is the graph input addmm_1 reused (64 x 256), in and out; tangents_1 (0-d); buf3 (1 x 256)
        194: 2 * 64 * 256 * F32 + F32 + 256 * F32,
        # buf4 is buf1 reused (64 x 256) in and out; le (64 x 256 bool); buf6 (1 x 256)
        209: 2 * 64 * 256 * F32 + 64 * 256 + 256 * F32,
    }


KERNEL = """triton_poi_fused_mul_0 = async_compile.triton('triton_poi_fused_mul_0', '''
@triton_heuristics.pointwise(
    size_hints={'x': 1024},
    triton_meta={'signature': {'in_ptr0': '*%s', 'out_ptr0': '*bf16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}},
)
''', device_str='cuda')
"""


def call(shape: str, arg: str = "arg0_1") -> str:
    return (KERNEL % "bf16") + f"""
    def call(self, args):
        arg0_1, = args
        assert_size_stride(arg0_1, ({shape}), (1, ))
        buf0 = empty_strided_cuda((1024, ), (1, ), torch.bfloat16)
        triton_poi_fused_mul_0.run({arg}, buf0, 1024, stream=stream0)
"""


def test_views_symbolic_shapes_and_unknown_types() -> None:
    text = call("1024, ")
    assert launch_traffic(text) == {text.splitlines().index(
        "        triton_poi_fused_mul_0.run(arg0_1, buf0, 1024, stream=stream0)") + 1: 1024 * 2 + 1024 * 2}
    # a view counts at its own shape
    assert list(launch_traffic(call("4096, ", "reinterpret_tensor(arg0_1, (512, ), (2, ), 0)")).values()) == [
        512 * 2 + 1024 * 2]
    assert launch_traffic(call("s0, ")) == {}  # dynamic shapes: no figure
    assert launch_traffic(call("1024, ", "unknown_buf")) == {}  # a shape not found
    assert launch_traffic((KERNEL % "fp4x2") + call("1024, ").split("'''", 2)[-1]) == {}  # a type not in the table
