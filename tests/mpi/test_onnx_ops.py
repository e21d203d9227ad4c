"""ONNX node tests for ``from_onnx``: small graphs built with ``onnx.helper``, compiled single-process and
compared element by element with onnxruntime. Several independent op instances share one graph (one
compile) where possible; extra shape variants are marked slow."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import dace_partition as dp  # noqa: E402
from dace_partition.errors import FrontendError  # noqa: E402
from dace_partition.runtime.launch import _with_bound, bound_values  # noqa: E402

ort.disable_telemetry_events()
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, I64: np.int64, B: np.bool_, TensorProto.DOUBLE: np.float64}


def make_model(nodes, inputs, outputs, inits=None, opset=20):
    """``inputs``: {name: array}; ``outputs``: {name: elem type}; ``inits``: {name: array}."""
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    vout = [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()]
    init = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", vin, vout, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def check(name, nodes, inputs, outputs, inits=None, opset=20, rtol=1e-5, atol=1e-6):
    """Imports the graph, runs it compiled and compares every output with onnxruntime."""
    model = make_model(nodes, inputs, outputs, inits, opset)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ref = sess.run(list(outputs), inputs)
    sdfg = dp.from_onnx(model, name=name)
    args = _with_bound(bound_values(sdfg), inputs)
    res = sdfg(**{k: np.array(v) for k, v in args.items()})  # fresh arrays: DaCe refuses NumPy views
    res = res if isinstance(res, tuple) else (res, )
    assert len(res) == len(ref)
    for out_name, r, e in zip(outputs, res, ref):
        r = np.asarray(r)
        assert r.dtype == e.dtype, f"{out_name}: dtype {r.dtype} != {e.dtype}"
        if e.shape == ():
            e = e.reshape(1)
        assert r.shape == e.shape, f"{out_name}: shape {r.shape} != {e.shape}"
        np.testing.assert_allclose(r, e, rtol=rtol, atol=atol, err_msg=out_name)
    return sdfg


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


@pytest.fixture
def r():
    return np.random.default_rng(7)


def f32(r, *shape, positive=False):
    a = r.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def test_elementwise_and_broadcasting(r):
    """Binary ops with NumPy broadcasting (both sides, rank differences, scalar constants) and unary ops."""
    ins = dict(a=f32(r, 2, 3, 4), b=f32(r, 3, 1), c=f32(r, 4), p=f32(r, 2, 3, 4, positive=True), s=f32(r, 1))
    nodes = [
        node("Add", ["a", "b"], ["add"]), node("Sub", ["b", "a"], ["sub"]), node("Mul", ["a", "c"], ["mul"]),
        node("Div", ["a", "p"], ["div"]), node("Pow", ["p", "b"], ["pow"]), node("Pow", ["a", "two"], ["sq"]),
        node("Sqrt", ["p"], ["sqrt"]), node("Erf", ["a"], ["erf"]), node("Relu", ["a"], ["relu"]),
        node("Tanh", ["a"], ["tanh"]), node("Sigmoid", ["a"], ["sigmoid"]), node("Gelu", ["a"], ["gelu"]),
        node("Gelu", ["a"], ["gelu_tanh"], approximate="tanh"), node("Mul", ["a", "half"], ["mulk"]),
        node("Add", ["c", "s"], ["adds"]), node("Exp", ["b"], ["exp"]), node("Neg", ["c"], ["neg"]),
        node("Add", ["a", "w"], ["addw"]), node("Max", ["a", "b", "c"], ["max"]), node("Min", ["a", "c"], ["min"]),
        node("Log", ["p"], ["log"]), node("Abs", ["a"], ["abs"]), node("Reciprocal", ["p"], ["recip"]),
    ]
    inits = dict(two=np.array(2.0, np.float32), half=np.array([0.5], np.float32), w=f32(r, 3, 4))
    outs = {n.output[0]: F for n in nodes}
    check("ew", nodes, ins, outs, inits)


def test_where_cast_compare_identity_constant(r):
    ins = dict(a=f32(r, 3, 4), b=f32(r, 4), i=r.integers(-5, 5, (3, 4)).astype(np.int64))
    ten = helper.make_tensor("ten", F, [1, 4], [10.0, 20.0, 30.0, 40.0])
    nodes = [
        node("Greater", ["a", "b"], ["gt"]), node("Where", ["gt", "a", "b"], ["where"]),
        node("Cast", ["i"], ["i2f"], to=F), node("Cast", ["a"], ["f2i"], to=I64),
        node("Cast", ["a"], ["f2d"], to=TensorProto.DOUBLE), node("Identity", ["a"], ["ident"]),
        node("Constant", [], ["tenc"], value=ten), node("Mul", ["a", "tenc"], ["mulc"]),
        node("Less", ["i", "zero"], ["lt"]), node("Equal", ["i", "zero"], ["eq"]), node("Not", ["lt"], ["not"]),
        node("LessOrEqual", ["a", "b"], ["le"]), node("GreaterOrEqual", ["i", "two"], ["ge"]),
        node("Div", ["i", "two"], ["idiv"]), node("Dropout", ["a"], ["drop"]), node("Identity", ["a"], ["ident2"]),
    ]
    inits = dict(zero=np.array(0, np.int64), two=np.array(2, np.int64))
    outs = dict(gt=B, where=F, i2f=F, f2i=I64, f2d=TensorProto.DOUBLE, ident=F, mulc=F, lt=B, eq=B, **{"not": B},
                le=B, ge=B, idiv=I64, drop=F, ident2=F)
    check("wcci", nodes, ins, outs, inits)


def test_matmul_gemm_einsum(r):
    """MatMul with 1-D, 2-D, 3-D@2-D and broadcast 4-D batches; Gemm with transposes, alpha, beta and a
    broadcast bias; Einsum with a batch, a contraction over two axes and an ellipsis."""
    ins = dict(x=f32(r, 4, 6), y=f32(r, 6, 5), b3=f32(r, 2, 4, 6), q=f32(r, 2, 3, 4, 6), k=f32(r, 3, 6, 5),
               v=f32(r, 6), xt=f32(r, 6, 4))
    nodes = [
        node("MatMul", ["x", "y"], ["mm2"]), node("MatMul", ["b3", "y"], ["mm3"]), node("MatMul", ["q", "k"], ["mm4"]),
        node("MatMul", ["v", "y"], ["mv"]), node("MatMul", ["x", "v"], ["xv"]),
        node("Gemm", ["x", "w", "bias"], ["gemm"], transB=1),
        node("Gemm", ["xt", "y", "c2"], ["gemm_t"], transA=1, alpha=0.5, beta=2.0),
        node("Einsum", ["q", "k"], ["ein1"], equation="bhmk,hkn->bhmn"),
        node("Einsum", ["b3", "b3"], ["ein2"], equation="bij,bij->i"),
        node("Einsum", ["q", "v"], ["ein3"], equation="...k,k->..."),
    ]
    inits = dict(w=f32(r, 5, 6), bias=f32(r, 5), c2=f32(r, 4, 5))
    check("linalg", nodes, ins, {n.output[0]: F for n in nodes}, inits, rtol=1e-4, atol=1e-5)


def test_softmax_layernorm_reductions(r):
    ins = dict(a=f32(r, 2, 3, 5))
    nodes = [
        node("Softmax", ["a"], ["sm"]), node("Softmax", ["a"], ["sm1"], axis=1), node("LogSoftmax", ["a"], ["lsm"]),
        node("LayerNormalization", ["a", "g", "be"], ["ln"], epsilon=1e-5),
        node("LayerNormalization", ["a", "g2"], ["ln2", "ln2_mean", "ln2_rstd"], axis=1, epsilon=1e-3),
        node("ReduceSum", ["a", "ax1"], ["rsum"]), node("ReduceSum", ["a", "ax02"], ["rsum0"], keepdims=0),
        node("ReduceMean", ["a", "ax1"], ["rmean"], keepdims=0), node("ReduceMax", ["a", "axm1"], ["rmax"]),
        node("ReduceSum", ["a"], ["rall"], keepdims=1), node("ReduceMin", ["a", "ax1"], ["rmin"], keepdims=0),
        node("ReduceL1", ["a", "ax1"], ["rl1"]), node("ReduceL2", ["a", "ax02"], ["rl2"], keepdims=0),
        node("ReduceL2", ["a", "axm1"], ["rl2k"]), node("ReduceSumSquare", ["a"], ["rss"], keepdims=0),
        node("ReduceLogSum", ["sm1", "axm1"], ["rlogsum"], keepdims=0),
    ]
    inits = dict(g=f32(r, 5), be=f32(r, 5), g2=f32(r, 3, 5), ax1=np.array([1]), ax02=np.array([0, 2]),
                 axm1=np.array([-1]))
    outs = {o: F for n in nodes for o in n.output}
    check("norm", nodes, ins, outs, inits, rtol=1e-4, atol=1e-5)


def test_shape_ops(r):
    """Transpose, Reshape (0 and -1), Flatten, Split, Concat, Squeeze, Unsqueeze, Gather, Slice, and the
    Shape/Expand constant folding the dynamo exporter relies on."""
    ins = dict(a=f32(r, 2, 3, 4), b=f32(r, 2, 1, 4))
    nodes = [
        node("Transpose", ["a"], ["tr"], perm=[2, 0, 1]), node("Transpose", ["a"], ["tr_rev"]),
        node("Reshape", ["a", "shp"], ["resh"]), node("Flatten", ["a"], ["flat"], axis=2),
        node("Split", ["a", "sizes"], ["sp0", "sp1"], axis=2), node("Split", ["a"], ["sp2", "sp3", "sp4"], axis=1,
                                                                    num_outputs=3),
        node("Concat", ["a", "b", "a"], ["cat"], axis=1), node("Squeeze", ["b", "ax1"], ["sq"]),
        node("Unsqueeze", ["a", "ax03"], ["unsq"]), node("Gather", ["a", "i1"], ["g_scalar"], axis=1),
        node("Gather", ["a", "i2"], ["g_vec"], axis=2), node("Gather", ["a", "i3"], ["g_mat"], axis=0),
        node("Slice", ["a", "st", "en", "axs"], ["slice"]), node("Shape", ["a"], ["shape"]),
        node("Mul", ["shape", "one"], ["shape1"]), node("Expand", ["b", "shape1"], ["expand"]),
        node("Relu", ["resh"], ["resh_relu"]),
    ]
    inits = dict(shp=np.array([0, -1, 2]), sizes=np.array([1, 3]), ax1=np.array([1]), ax03=np.array([0, 3]),
                 i1=np.array(2), i2=np.array([3, 0, 3]), i3=np.array([[1, 0], [0, 1]]), st=np.array([1, 0]),
                 en=np.array([3, 3]), axs=np.array([1, 2]), one=np.array([1]))
    outs = {o: (I64 if o == "shape" else F) for n in nodes for o in n.output if o not in ("shape1", )}
    check("shapes", nodes, ins, outs, inits)


def test_initializer_becomes_bound_argument(r, tmp_path):
    """Weights are SDFG arguments (so schedules can split them), bound to their values."""
    w = f32(r, 4, 3)
    model = make_model([node("MatMul", ["x", "fc.weight"], ["y"])], dict(x=f32(r, 2, 4)), dict(y=F),
                       {"fc.weight": w})
    sdfg = dp.from_onnx(model, name="bound")
    assert "fc_weight" in sdfg.arglist() and "x" in sdfg.arglist()
    np.testing.assert_array_equal(bound_values(sdfg)["fc_weight"], w)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for source in (path, str(path), model.SerializeToString()):  # files and serialized models too
        assert set(dp.from_onnx(source, name="bound").arglist()) == set(sdfg.arglist())


def test_unsupported_op_names_op_and_node(r):
    model = make_model([node("Relu", ["x"], ["h"], name="act"), node("Hardmax", ["h"], ["y"], name="hm")],
                       dict(x=f32(r, 2, 4)), dict(y=F))
    with pytest.raises(FrontendError, match=r"Hardmax.*'hm'"):
        dp.from_onnx(model)


def test_dynamic_shape_is_rejected():
    x = helper.make_tensor_value_info("x", F, ["batch", 4])
    y = helper.make_tensor_value_info("y", F, None)
    model = helper.make_model(helper.make_graph([node("Relu", ["x"], ["y"])], "g", [x], [y]))
    with pytest.raises(FrontendError, match=r"'x'.*batch"):
        dp.from_onnx(model)


def test_dynamic_reshape_target_is_rejected(r):
    model = make_model([node("Reshape", ["x", "s"], ["y"], name="rs")], dict(x=f32(r, 2, 4),
                                                                            s=np.array([4, 2])), dict(y=F))
    with pytest.raises(FrontendError, match=r"shape 's'.*'rs'"):
        dp.from_onnx(model)


@pytest.mark.slow
def test_variants_slow(r):
    """More shapes: 1-D and 4-D broadcasting, softmax over axis 0, opset-11 softmax (coerced to 2-D),
    reductions with attribute axes (opset 11)."""
    ins = dict(a=f32(r, 2, 1, 3, 1), b=f32(r, 4, 1, 5), c=f32(r, 5))
    nodes = [node("Add", ["a", "b"], ["add"]), node("Div", ["c", "b"], ["div"]), node("Softmax", ["b"], ["sm0"],
                                                                                    axis=0)]
    check("var20", nodes, ins, {n.output[0]: F for n in nodes})
    ins = dict(a=f32(r, 2, 3, 4))
    nodes = [node("Softmax", ["a"], ["sm"], axis=1), node("ReduceSum", ["a"], ["rs"], axes=[0, 2], keepdims=1),
             node("ReduceMean", ["a"], ["rm"], axes=[-1], keepdims=0), node("Squeeze", ["rs"], ["sq"], axes=[0])]
    check("var11", nodes, ins, {n.output[0]: F for n in nodes}, opset=11)


def test_conv_pool_batchnorm_gather(r):
    """Conv (stride 2, asymmetric pads, dilation, no bias; SAME_UPPER with bias), MaxPool (pads, strides,
    ceil_mode), BatchNormalization (running statistics), GlobalAveragePool, Flatten of a 4-D tensor (a
    merging copy map), and Gather with run-time indices (negative ones too) along axes 0 and 1."""
    ins = dict(x=f32(r, 2, 3, 7, 6), idx=np.array([[0, 4], [-1, 2]], dtype=np.int64), t=f32(r, 5, 3),
               jdx=np.array([2, -3, 1], dtype=np.int64))
    inits = dict(w=f32(r, 4, 3, 3, 2), w3=f32(r, 2, 3, 3, 3), b3=f32(r, 2), s=f32(r, 3, positive=True),
                 bb=f32(r, 3), m=f32(r, 3), v=f32(r, 3, positive=True))
    nodes = [
        node("Conv", ["x", "w"], ["conv"], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
        node("Conv", ["x", "w3", "b3"], ["same"], auto_pad="SAME_UPPER", strides=[2, 2]),
        node("MaxPool", ["x"], ["pool"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]),
        node("MaxPool", ["x"], ["pool_ceil"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["bn"], epsilon=1e-3),
        node("GlobalAveragePool", ["x"], ["gap"]),
        node("Flatten", ["x"], ["flat"], axis=1),
        node("Gather", ["t", "idx"], ["rows"], axis=0),
        node("Gather", ["t", "jdx"], ["cols"], axis=1),
    ]
    check("convpool", nodes, ins, {n.output[0]: F for n in nodes}, inits, rtol=1e-4, atol=1e-5)


def test_activations_norms_pools_pads_and_upsampling_of_everyday_modules(r):
    """The nodes PyTorch's everyday modules export to beyond the basics: LeakyRelu, PRelu (per channel), Elu,
    Celu, Selu, Softplus (large inputs too), Mish, HardSigmoid, HardSwish, Clip (both bounds, one bound);
    InstanceNormalization (GroupNorm, InstanceNorm); AveragePool with padding counted and not, ceil_mode;
    Pad in constant, edge, reflect and wrap modes (a wrap as wide as its axis too) and a crop; Resize by integer factors (nearest; linear on one
    or two axes, half_pixel, pytorch_half_pixel and asymmetric, so edges clamp and phases differ); ConvTranspose
    (strides, dilations, uneven pads, output_padding, bias); grouped Conv (depthwise with two outputs per
    channel; two groups of four); DepthToSpace
    in both modes. One graph, one build; every output against onnxruntime. A batch of 1 (axes of extent 1)
    goes through the padded Conv and Pad as well."""
    ins = dict(a=f32(r, 2, 3, 6, 5) * 8, one=f32(r, 1, 3, 5, 4), d=f32(r, 2, 8, 3, 2))
    inits = dict(slope=f32(r, 3, 1, 1), s=f32(r, 3, positive=True), bb=f32(r, 3), w=f32(r, 2, 3, 3, 3),
                 lo=np.array(-0.5, np.float32), hi=np.array(0.75, np.float32), pads=np.array([0, 0, 1, 2, 0, 0, 2, 1]),
                 crop=np.array([0, 0, -1, 0, 0, 0, 0, -1]), wide=np.array([0, 0, 5, 0, 0, 0, 1, 4]), val=np.array(1.5, np.float32),
                 up=np.array([1, 1, 2, 3], np.float32), roi=np.array([], np.float32),
                 up3=np.array([1, 1, 3, 2], np.float32), up_w=np.array([1, 1, 1, 2], np.float32),
                 up2=np.array([1, 1, 2, 2], np.float32), wt=f32(r, 3, 2, 3, 3), bt=f32(r, 2),
                 wdw=f32(r, 6, 1, 3, 3), wg2=f32(r, 4, 4, 2, 2))
    nodes = [
        node("LeakyRelu", ["a"], ["leaky"], alpha=0.2), node("PRelu", ["a", "slope"], ["prelu"]),
        node("Elu", ["a"], ["elu"], alpha=0.7), node("Celu", ["a"], ["celu"], alpha=1.3), node("Selu", ["a"], ["selu"]),
        node("Softplus", ["a"], ["softplus"]), node("Mish", ["a"], ["mish"]),
        node("HardSigmoid", ["a"], ["hsig"], alpha=0.25, beta=0.4), node("HardSwish", ["a"], ["hswish"]),
        node("Clip", ["a", "lo", "hi"], ["clip"]), node("Clip", ["a", "", "hi"], ["clip_hi"]),
        node("InstanceNormalization", ["a", "s", "bb"], ["inorm"], epsilon=1e-3),
        node("AveragePool", ["a"], ["avg"], kernel_shape=[2, 2], strides=[2, 2]),
        node("AveragePool", ["a"], ["avg_pad"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
             count_include_pad=1),
        node("AveragePool", ["a"], ["avg_pad_excl"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
        node("AveragePool", ["a"], ["avg_ceil"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        node("Pad", ["a", "pads", "val"], ["pad_const"]), node("Pad", ["a", "pads"], ["pad_edge"], mode="edge"),
        node("Pad", ["a", "pads"], ["pad_reflect"], mode="reflect"), node("Pad", ["a", "crop"], ["pad_crop"]),
        node("Pad", ["a", "pads"], ["pad_wrap"], mode="wrap"), node("Pad", ["one", "wide"], ["pad_wrap_wide"], mode="wrap"),
        node("Pad", ["one", "pads"], ["pad_one"]), node("Conv", ["one", "w"], ["conv_one"], pads=[1, 1, 1, 1]),
        node("Resize", ["a", "roi", "up"], ["resize"], mode="nearest", coordinate_transformation_mode="asymmetric",
             nearest_mode="floor"),
        node("Resize", ["a", "roi", "up"], ["bilinear"], mode="linear"),
        node("Resize", ["a", "roi", "up3"], ["bilinear_pt"], mode="linear",
             coordinate_transformation_mode="pytorch_half_pixel"),
        node("Resize", ["a", "roi", "up"], ["bilinear_asym"], mode="linear", coordinate_transformation_mode="asymmetric"),
        node("Resize", ["a", "roi", "up_w"], ["linear_w"], mode="linear"),
        node("Resize", ["one", "roi", "up2"], ["bilinear_one"], mode="linear"),
        node("Conv", ["a", "wdw"], ["conv_dw"], group=3, pads=[1, 1, 1, 1], strides=[2, 1]),
        node("Conv", ["d", "wg2"], ["conv_g2"], group=2),
        node("ConvTranspose", ["a", "wt", "bt"], ["convt"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0]),
        node("ConvTranspose", ["a", "wt"], ["convt_dil"], dilations=[2, 1]),
        node("ConvTranspose", ["one", "wt"], ["convt_one"], strides=[1, 2], pads=[0, 2, 1, 0], output_padding=[0, 1]),
        node("DepthToSpace", ["d"], ["d2s_crd"], blocksize=2, mode="CRD"),
        node("DepthToSpace", ["d"], ["d2s_dcr"], blocksize=2, mode="DCR"),
    ]
    check("everyday_ops", nodes, ins, {n.output[0]: F for n in nodes}, inits, rtol=1e-4, atol=1e-5)


def test_lstm_and_gru_nodes_in_both_directions(r):
    """LSTM in reverse with no bias, initial states given as graph inputs and the whole-sequence
    sequence_lens; GRU bidirectional with bias and no initial state. Every output against onnxruntime."""
    ins = dict(x=f32(r, 4, 2, 3), h0=f32(r, 1, 2, 5), c0=f32(r, 1, 2, 5))
    inits = dict(w=f32(r, 1, 20, 3), rr=f32(r, 1, 20, 5), lens=np.array([4, 4], np.int32),
                 gw=f32(r, 2, 9, 3), gr=f32(r, 2, 9, 3), gb=f32(r, 2, 18))
    nodes = [node("LSTM", ["x", "w", "rr", "", "lens", "h0", "c0"], ["ly", "lh", "lc"], hidden_size=5,
                  direction="reverse"),
             node("GRU", ["x", "gw", "gr", "gb"], ["gy", "gh"], hidden_size=3, direction="bidirectional",
                  linear_before_reset=1)]
    check("recurrent", nodes, ins, {o: F for n in nodes for o in n.output}, inits, rtol=1e-4, atol=1e-5)


def test_everyday_variants_we_do_not_cover_are_refused(r):
    x = f32(r, 2, 3, 4, 4)
    cases = [
        (node("Resize", ["x", "roi", "up"], ["y"], mode="linear", coordinate_transformation_mode="align_corners",
              name="corners"),
         dict(roi=np.array([], np.float32), up=np.array([1, 1, 2, 2], np.float32)),
         r"mode 'linear' \(align_corners.*linear without align_corners.*'corners' \(Resize\)"),
        (node("Resize", ["x", "roi", "up"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
              nearest_mode="floor", name="half"),
         dict(roi=np.array([], np.float32), up=np.array([1, 1, 1.5, 2], np.float32)), r"1\.5.*'half' \(Resize\)"),
        (node("ConvTranspose", ["x", "wg"], ["y"], group=3, name="convt_g"), dict(wg=f32(r, 3, 1, 2, 2)),
         r"ConvTranspose with group=3.*'convt_g' \(ConvTranspose\)"),
        (node("GRU", ["x", "w3", "r3"], ["y"], hidden_size=2, name="gru0"),
         dict(w3=f32(r, 1, 6, 4), r3=f32(r, 1, 6, 2)), r"GRU with linear_before_reset=0.*'gru0' \(GRU\)"),
        (node("LSTM", ["x", "w4", "r4"], ["y"], hidden_size=2, clip=3.0, name="lstm_clip"),
         dict(w4=f32(r, 1, 8, 4), r4=f32(r, 1, 8, 2)), r"LSTM with clip.*'lstm_clip' \(LSTM\)"),
        (node("Pad", ["x", "p"], ["y"], mode="wrap", name="wrap"), dict(p=np.array([0, 0, 5, 1, 0, 0, 1, 1])),
         r"wrap wider than its axis.*'wrap' \(Pad\)"),
        (node("Pad", ["x", "p"], ["y"], mode="reflect", name="wide"), dict(p=np.array([0, 0, 4, 0, 0, 0, 0, 0])),
         r"reflection as wide as its axis or wider.*'wide' \(Pad\)"),
    ]
    for n, inits, msg in cases:
        model = make_model([n], dict(x=x), dict(y=F), inits)
        with pytest.raises(FrontendError, match=msg):
            dp.from_onnx(model)


def test_conv_pool_batchnorm_unsupported_variants_are_refused(r):
    x, w = f32(r, 1, 4, 5, 5), f32(r, 4, 2, 3, 3)
    cases = [
        (node("Conv", ["x", "w"], ["y"], group=3, name="grouped"), dict(w=w),
         r"does not fit input \(1, 4, 5, 5\) with group=3.*'grouped' \(Conv\)"),
        (node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="mp"), {}, r"Indices.*'mp' \(MaxPool\)"),
        (node("BatchNormalization", ["x", "c", "c", "c", "c"], ["y"], training_mode=1, name="bn"), dict(c=f32(r, 4)),
         r"training mode.*'bn' \(BatchNormalization\)"),
        (node("Gather", ["x", "f"], ["y"], name="g"), {}, r"indices 'f' must be integers.*'g' \(Gather\)"),
    ]
    for n, inits, msg in cases:
        inputs = dict(x=x, f=f32(r, 2)) if "f" in n.input else dict(x=x)
        model = make_model([n], inputs, {o: F for o in n.output}, inits)
        with pytest.raises(FrontendError, match=msg):
            dp.from_onnx(model)


def test_variadic_sign_rounding_trigonometric_and_logical_ops(r):
    """Sum and Mean of three inputs, Sign, Shrink, ThresholdedRelu, Softsign, Floor, Ceil, Sin, Cos and the
    logical And, Or, Xor, in one graph (one compile)."""
    ins = dict(a=f32(r, 3, 4) * 3, b=f32(r, 4), c=f32(r, 3, 1), p=r.random((3, 4)) > 0.5, q=r.random((3, 4)) > 0.5)
    ins["a"][0, :2] = 0.0  # Sign of zero
    nodes = [
        node("Sum", ["a", "b", "c"], ["sum"]), node("Mean", ["a", "b", "c"], ["mean"]), node("Sum", ["a"], ["sum1"]),
        node("Sign", ["a"], ["sign"]), node("Shrink", ["a"], ["shrink"], lambd=1.2, bias=0.3),
        node("ThresholdedRelu", ["a"], ["trelu"], alpha=0.4), node("Softsign", ["a"], ["softsign"]),
        node("Floor", ["a"], ["floor"]), node("Ceil", ["a"], ["ceil"]), node("Sin", ["a"], ["sin"]),
        node("Cos", ["a"], ["cos"]), node("And", ["p", "q"], ["and"]), node("Or", ["p", "q"], ["or"]),
        node("Xor", ["p", "q"], ["xor"]),
    ]
    outs = {n.output[0]: (B if n.op_type in ("And", "Or", "Xor") else F) for n in nodes}
    check("variadic_sign", nodes, ins, outs)


def test_tile_local_response_norm_global_max_pool_and_pools_past_the_point_read_limit(r):
    """Tile (torch.repeat), LRN (AlexNet, GoogLeNet) with windows of 5 and 3 channels, GlobalMaxPool, and max
    and average pools of more than 64 taps, which accumulate over the window (a dilated 9 x 8 max pool,
    and a padded 9 x 9 average pool whose border windows count fewer elements)."""
    ins = dict(x=f32(r, 2, 5, 6, 7), big=f32(r, 1, 2, 30, 28))
    nodes = [
        node("Tile", ["x", "reps"], ["tile"]),
        node("LRN", ["x"], ["lrn5"], size=5, alpha=2e-3, beta=0.75, bias=1.5),
        node("LRN", ["x"], ["lrn3"], size=3),
        node("GlobalMaxPool", ["x"], ["gmp"]),
        node("MaxPool", ["big"], ["bigmax"], kernel_shape=[9, 8], strides=[3, 2], dilations=[2, 1], pads=[2, 1, 2, 3]),
        node("AveragePool", ["big"], ["bigavg"], kernel_shape=[9, 9], strides=[4, 4], pads=[3, 3, 3, 3]),
    ]
    check("tile_lrn_pools", nodes, ins, {n.output[0]: F for n in nodes}, dict(reps=np.array([1, 2, 1, 3])), opset=19)


def test_nan_and_infinity_tests_and_running_sums(r):
    """IsNaN and IsInf (each sign) on NaN and infinite inputs, which the generated code, compiled with
    -ffast-math, must not assume away; CumSum along each axis, exclusive and reversed, on integers (exact)
    and floats (onnxruntime's order of summation, within rounding)."""
    x = f32(r, 5, 6)
    x[0, 1] = x[4, 5] = np.nan
    x[2, 3], x[3, 0] = np.inf, -np.inf
    ids = r.integers(-3, 9, (5, 6))
    nodes = [node("IsNaN", ["x"], ["nan"]), node("IsInf", ["x"], ["inf"]),
             node("IsInf", ["x"], ["pinf"], detect_negative=0), node("IsInf", ["x"], ["ninf"], detect_positive=0),
             node("Where", ["nan", "zero", "x"], ["clean"]),
             node("CumSum", ["ids", "one"], ["c"]), node("CumSum", ["ids", "zero_i32"], ["c_excl"], exclusive=1),
             node("CumSum", ["ids", "last"], ["c_rev"], reverse=1),
             node("CumSum", ["ids", "one"], ["c_rev_excl"], reverse=1, exclusive=1),
             node("CumSum", ["y", "one"], ["fc"])]
    outs = dict(nan=B, inf=B, pinf=B, ninf=B, clean=F, c=I64, c_excl=I64, c_rev=I64, c_rev_excl=I64, fc=F)
    inits = dict(zero=np.float32(0), one=np.int64(1), zero_i32=np.int32(0), last=np.array([-1]))
    sdfg = check("isnan_cumsum", nodes, dict(x=x, ids=ids, y=f32(r, 3, 7)), outs, inits)
    assert all("__dp_isnan" in sdfg.global_code[k].as_string for k in ("frame", "cuda"))


def test_gathers_with_constant_indices(r):
    """GatherND with constant index tuples (Falcon's pick of query, key and value: ``[[-2]]`` on the leading
    axis; pairs over two axes), and a GatherElements on constants along 40 positions (GPT-J's rotary table),
    folded at import, added to an input."""
    x, y = f32(r, 6, 4, 3), f32(r, 5, 40)
    nodes = [node("GatherND", ["x", "pick"], ["nd1"]), node("GatherND", ["x", "pairs"], ["nd2"]),
             node("GatherElements", ["table", "positions"], ["rot"], axis=1), node("Add", ["rot", "y"], ["ge"])]
    inits = dict(pick=np.array([[-2]]), pairs=np.array([[[0, 3], [5, -1]], [[2, 2], [1, 0]]]),
                 table=f32(r, 5, 40), positions=r.integers(-40, 40, (5, 40)))
    check("gather_nd_elements", nodes, dict(x=x, y=y), dict(nd1=F, nd2=F, ge=F), inits)
    bad = make_model([node("GatherND", ["x", "far"], ["o"])], dict(x=x), dict(o=F), dict(far=np.array([[6]])))
    with pytest.raises(FrontendError, match=r"out of range for the leading axes \(6,\) of 'x'"):
        dp.from_onnx(bad)


def test_opset_6_models_as_older_pytorch_exported_them(r):
    """Opset 6 spellings: Slice with its bounds as attributes, a per-channel PRelu slope of shape [C], and
    Add/Mul with ``broadcast=1, axis=1``. onnxruntime runs opset 7 on, so NumPy gives the expected values."""
    x, slope, bias = f32(r, 2, 3, 4, 5), f32(r, 3), f32(r, 3, 4)
    nodes = [node("Slice", ["x"], ["sl"], starts=[1, 2], ends=[3, 100], axes=[1, 3]),
             node("PRelu", ["x", "slope"], ["pr"]),
             node("Add", ["x", "bias"], ["add"], broadcast=1, axis=1),
             node("Mul", ["x", "slope"], ["mul"], broadcast=1, axis=1)]
    model = make_model(nodes, dict(x=x), dict(sl=F, pr=F, add=F, mul=F), dict(slope=slope, bias=bias), opset=6)
    sdfg = dp.from_onnx(model, name="opset6")
    sl, pr, add, mul = sdfg(**_with_bound(bound_values(sdfg), dict(x=x)))
    per_channel = slope[None, :, None, None]
    np.testing.assert_array_equal(sl, x[:, 1:3, :, 2:])
    np.testing.assert_allclose(pr, np.where(x > 0, x, per_channel * x), rtol=1e-6)
    np.testing.assert_allclose(add, x + bias[None, :, :, None], rtol=1e-6)
    np.testing.assert_allclose(mul, x * per_channel, rtol=1e-6)


def test_a_slope_that_does_not_broadcast_is_refused_in_words(r):
    model = make_model([node("PRelu", ["x", "s"], ["y"], name="pr")], dict(x=f32(r, 2, 3, 4)), dict(y=F),
                       dict(s=f32(r, 3)))
    with pytest.raises(FrontendError, match=r"slope of shape \(3,\) does not broadcast to.*\(2, 3, 4\).*'pr'"):
        dp.from_onnx(model)


def test_graph_inputs_named_as_pytorch_exports_them_are_passed_by_their_onnx_names(r):
    """PyTorch's exporter names inputs '0', '1' and weights 'onnx::MatMul_3': not identifiers, so the arguments
    are 't_0', ...; dp.run takes the ONNX names on 2 ranks, and refuses a name given twice."""
    x, w = f32(r, 8, 6), f32(r, 6, 4)
    model = make_model([node("MatMul", ["0", "onnx::MatMul_3"], ["mm"]), node("Relu", ["mm"], ["2"])],
                       {"0": x}, {"2": F}, {"onnx::MatMul_3": w})
    sdfg = dp.from_onnx(model, name="onnx_names")
    assert {"t_0", "onnx__MatMul_3"} <= set(sdfg.arglist())
    dp.lower(sdfg, ranks=2)
    np.testing.assert_allclose(dp.run(sdfg, 2, **{"0": x}), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    w2 = f32(r, 6, 4)  # a weight given by its ONNX name overrides the bound one
    np.testing.assert_allclose(dp.run(sdfg, 2, **{"0": x, "onnx::MatMul_3": w2}), np.maximum(x @ w2, 0),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"'t_0' is given twice: as '0' and as 't_0'"):
        dp.run(sdfg, 2, **{"0": x, "t_0": x})


def test_element_types_the_generated_code_cannot_hold_are_refused_in_words(r):
    """float16 (no CPU arithmetic in DaCe's C++: a compile error), bfloat16 and strings (no type: a KeyError
    deep in DaCe), as a graph input, a Cast's target and a constant; and einsum terms that repeat an index."""
    x = f32(r, 2, 3)
    cases = [
        (make_model([node("Relu", ["h"], ["y"], name="act")], dict(h=x.astype(np.float16)),
                    dict(y=TensorProto.FLOAT16)),
         r"graph input 'h' has element type float16, which the generated code does not support"),
        (make_model([node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16, name="down")], dict(x=x),
                    dict(y=TensorProto.BFLOAT16)), r"its result has element type bfloat16.*'down' \(Cast\)"),
        (make_model([node("Add", ["x", "c"], ["y"], name="plus")], dict(x=x), dict(y=F), dict(c=x.astype(np.float16))),
         r"element type float16.*'plus' \(Add\)"),
        (make_model([node("Einsum", ["s"], ["y"], equation="bii->bi", name="diag")],
                    dict(s=f32(r, 2, 3, 3)), dict(y=F)), r"repeats an index \(a diagonal or a trace\).*'diag'"),
    ]
    for model, msg in cases:
        with pytest.raises(FrontendError, match=msg):
            dp.from_onnx(model)
