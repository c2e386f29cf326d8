//! Export straight from a `network!`'s graph, without an example input: named dynamic
//! dims, nested blocks with const generics, errors naming the layer, and the graph of
//! derived layers, recurrent layers, attention and constructor blocks.

use super::*;

/// The `dim_param`s (or sizes) of a graph input or output.
pub(super) fn io_dims(exported: &Exported, output: bool, i: usize) -> Vec<String> {
    use onnx::proto::{tensor_shape_proto::dimension::Value as D, type_proto::Value as T};
    let g = exported.model.graph.as_ref().expect("graph");
    let info = if output { &g.output[i] } else { &g.input[i] };
    let Some(T::TensorType(t)) = info.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        panic!("a tensor type");
    };
    t.shape
        .as_ref()
        .expect("a shape")
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(D::DimParam(p)) => p.clone(),
            Some(D::DimValue(v)) => v.to_string(),
            None => "?".into(),
        })
        .collect()
}

/// The state-dict keys of a module's parameters and running statistics (the batch
/// counters are not read by the forward).
pub(super) fn forward_state(m: &impl Module) -> Vec<String> {
    let mut keys: Vec<String> = m
        .state_dict()
        .into_keys()
        .filter(|k| !k.ends_with("num_batches_tracked"))
        .collect();
    keys.sort();
    keys
}

#[test]
fn network_graphs_export_without_an_example_input() {
    manual_seed(7);
    // The MLP and LeNet: straight from the macro's graph, with `N` a dim_param.
    let sets = [
        vec![Tensor::randn(&[2, 1, 28, 28], DType::F32, &Device::Cpu)],
        vec![Tensor::randn(&[5, 1, 28, 28], DType::F32, &Device::Cpu)],
    ];
    let mlp = Mlp::new(&Device::Cpu);
    let exported = onnx::network_graph(&mlp).expect("export mlp from its graph");
    assert_eq!(exported.op_types(), ["Flatten", "Gemm", "Relu", "Gemm"]);
    assert_eq!(
        params_of(&exported),
        ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    );
    assert_eq!(io_dims(&exported, false, 0), ["N", "1", "28", "28"]);
    assert_eq!(io_dims(&exported, true, 0), ["N", "10"]);
    assert_eq!(
        exported.model.graph.as_ref().expect("graph").input[0]
            .name
            .as_deref(),
        Some("x"),
        "the input keeps its DSL name"
    );
    check(
        "mlp_graph",
        &exported,
        |xs| vec![mlp.forward(&xs[0])],
        &sets,
        1e-4,
    );

    let lenet = LeNet::new(&Device::Cpu);
    let exported = onnx::network_graph(&lenet).expect("export lenet from its graph");
    assert_eq!(
        exported.op_types(),
        [
            "Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Flatten", "Gemm", "Relu",
            "Gemm", "Relu", "Gemm"
        ]
    );
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&lenet));
    // Every intermediate value carries its compile-time shape, `N` included.
    let g = exported.model.graph.as_ref().expect("graph");
    assert!(
        g.value_info.len() >= 10,
        "{} value_info entries",
        g.value_info.len()
    );
    check(
        "lenet_graph",
        &exported,
        |xs| vec![lenet.forward(&xs[0])],
        &sets,
        1e-4,
    );
    // Saved to a file as `export_onnx(&model, path)`, and loaded back.
    let dir = std::env::temp_dir().join(format!("ferrograd-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("lenet.onnx");
    onnx::export_onnx(&lenet, &path).expect("export to a file");
    let loaded = onnx::load(&path).expect("load the file");
    let y = loaded.run(&sets[1]).expect("run")[0].clone();
    let want = no_grad(|| lenet.forward(&sets[1][0]));
    assert!(y.sub(&want).abs().max_all().item::<f32>() < 1e-4);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unet_graph_nests_blocks_with_const_generics() {
    manual_seed(8);
    let mut unet = UNet::new(&Device::Cpu);
    unet.eval();
    randomize(&unet);
    let exported = onnx::network_graph(&unet).expect("export unet from its graph");
    // The nested `DoubleConv<CIN, COUT>` blocks write their parameters under their
    // fields, as the state dict names them.
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&unet));
    assert!(
        names.contains(&"enc1.block.1.running_var".to_string()),
        "{names:?}"
    );
    assert_eq!(io_dims(&exported, false, 0), ["N", "3", "4*H", "4*W"]);
    assert_eq!(io_dims(&exported, true, 0), ["N", "2", "4*H", "4*W"]);
    let sets = [
        vec![Tensor::randn(&[1, 3, 16, 12], DType::F32, &Device::Cpu)],
        vec![Tensor::randn(&[2, 3, 8, 20], DType::F32, &Device::Cpu)],
    ];
    check(
        "unet_graph",
        &exported,
        |xs| vec![unet.forward(&xs[0])],
        &sets,
        1e-4,
    );
}

#[test]
fn network_graph_errors_name_the_layer() {
    // A layer in training mode, and a layer type without a lowering, are errors naming
    // the layer's path; never a file.
    let mut unet = UNet::new(&Device::Cpu);
    unet.train();
    let err = onnx::network_graph(&unet).expect_err("batch norm in training mode");
    let msg = err.to_string();
    assert!(
        msg.contains("BatchNorm2d") && msg.contains("enc1.block.1") && msg.contains("eval()"),
        "{msg}"
    );
}

#[test]
fn bert_layer_graph_with_named_batch_and_length() {
    manual_seed(9);
    let mut bert = BertLayer::new(&Device::Cpu);
    bert.eval();
    randomize(&bert);
    let exported = onnx::network_graph(&bert).expect("export bert from its graph");
    for (i, name) in ["ids", "positions", "types"].iter().enumerate() {
        assert_eq!(io_dims(&exported, false, i), ["N", "T"], "input {name}");
    }
    assert_eq!(io_dims(&exported, true, 0), ["N", "T", "32"]);
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&bert));
    let forward = |xs: &[Tensor]| vec![bert.forward(&xs[0], &xs[1], &xs[2])];
    let sets = [token_inputs(2, 5, 1), token_inputs(3, 9, 2)];
    check("bert_layer_graph", &exported, forward, &sets, 1e-4);
}

mod graph_nets {
    use ferrograd::prelude::*;

    network! {
        /// Two inputs, two outputs, a gated unit from `chunk`, scalar arithmetic, a GRU.
        pub struct TwoTower(a: [N, T, 8], b: [N, 6]) -> ([N, 4], [N, 4]) {
            let (gate, value) = a -> proj: Linear(8 -> 16) -> chunk(2, dim = -1);
            let (seq, last) = gru: GRU(8 -> 8, batch_first = true)(value * sigmoid(gate));
            let left = seq -> mean(dim = 1) -> head_a: Linear(8 -> 4);
            let right = b -> head_b: Linear(6 -> 4) -> tanh;
            (left, 1.5 - right * 0.5)
        }
    }

    network! {
        /// Pre-norm encoder layers repeated, then a post-norm one.
        pub struct Encoder(x: [N, T, 32]) -> [N, T, 32] {
            pre: [TransformerEncoderLayer(32, 4, dim_feedforward = 64, dropout = 0.0, batch_first = true, norm_first = true, activation = "gelu"); 2],
            post: TransformerEncoderLayer(32, 4, dim_feedforward = 48, dropout = 0.0, batch_first = true),
        }
    }

    /// A `#[derive(Module)]` layer with declared shapes and a hand-written forward: the
    /// graph export traces this one layer.
    #[derive(ferrograd::nn::Module)]
    #[module(input = [N, 16], output = [N, 16], parameters = 16 * 16 + 16 + 32)]
    pub struct Gated {
        fc: ferrograd::nn::Linear,
        norm: ferrograd::nn::LayerNorm,
    }

    impl Gated {
        pub fn new(device: &Device) -> Self {
            Gated {
                fc: ferrograd::nn::Linear::new(16, 16, device),
                norm: ferrograd::nn::LayerNorm::new(&[16], device),
            }
        }
        pub fn forward(&self, x: &Tensor) -> Tensor {
            let h = self.fc.forward(x);
            self.norm.forward(&(x + &h.sigmoid().mul(&h)))
        }
    }

    network! {
        /// Derived layers, one of them repeated, between built-in ones.
        pub struct WithDerived(x: [N, 10]) -> [N, 3] {
            inp: Linear(10 -> 16),
            gate: Gated,
            more: [Gated; 2],
            out: Linear(16 -> 3),
        }
    }

    network! {
        /// A ResNet basic block whose sizes are constructor arguments.
        pub struct Basic[cin -> cout, stride = 1](x: [N, cin, H, W])
            -> [N, cout, (H - 1) / stride + 1, (W - 1) / stride + 1] {
            let y = x
                -> conv1: Conv2d(cin -> cout, kernel = 3, stride = stride, padding = 1, bias = false)
                -> bn1: BatchNorm2d(cout) -> relu
                -> conv2: Conv2d(cout -> cout, kernel = 3, padding = 1, bias = false)
                -> bn2: BatchNorm2d(cout);
            let short = x -> down: (Conv2d(cin -> cout, kernel = 1, stride = stride, bias = false), BatchNorm2d(cout));
            relu(y + short)
        }

        /// Constructor blocks nested, one repeated; a pooled head.
        pub struct Stage(x: [N, 8, H, W]) -> [N, 10] {
            first: Basic(8 -> 16, stride = 2),
            rest: [Basic(16 -> 16); 2],
            adaptive_avg_pool2d(1),
            flatten,
            fc: Linear(16 -> 10),
        }
    }
}

#[test]
fn graph_export_traces_derived_layers_only() {
    manual_seed(12);
    let net = graph_nets::WithDerived::new(&Device::Cpu);
    randomize(&net);
    let exported = onnx::network_graph(&net).expect("export with derived layers");
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&net));
    assert!(
        names.contains(&"more.1.norm.weight".to_string()),
        "{names:?}"
    );
    assert_eq!(io_dims(&exported, false, 0), ["N", "10"]);
    let x = |n: usize| vec![Tensor::randn(&[n, 10], DType::F32, &Device::Cpu)];
    check(
        "with_derived_graph",
        &exported,
        |xs| vec![net.forward(&xs[0])],
        &[x(2), x(7)],
        1e-4,
    );
}

#[test]
fn graph_export_of_recurrent_attention_and_constructor_blocks() {
    use graph_nets::{Encoder, Stage, TwoTower};
    use nets::LstmClassifier;
    manual_seed(11);
    let mut lstm = LstmClassifier::new(&Device::Cpu);
    lstm.eval();
    let exported = onnx::network_graph(&lstm).expect("export the LSTM classifier");
    assert!(exported.op_types().contains(&"LSTM".to_string()));
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&lstm));
    let ids = |n: usize, t: usize, s: usize| {
        vec![Tensor::from_vec(
            (0..n * t).map(|i| ((i * 7 + s) % 100) as i64).collect(),
            &[n, t],
        )]
    };
    check(
        "lstm_classifier_graph",
        &exported,
        |xs| vec![lstm.forward(&xs[0])],
        &[ids(2, 5, 0), ids(3, 8, 1)],
        1e-4,
    );

    let mut towers = TwoTower::new(&Device::Cpu);
    towers.eval();
    let exported = onnx::network_graph(&towers).expect("export the two towers");
    assert!(exported.op_types().contains(&"Split".to_string()));
    assert!(exported.op_types().contains(&"GRU".to_string()));
    assert_eq!(io_dims(&exported, false, 0), ["N", "T", "8"]);
    assert_eq!(io_dims(&exported, false, 1), ["N", "6"]);
    let pair = |n: usize, t: usize| {
        vec![
            Tensor::randn(&[n, t, 8], DType::F32, &Device::Cpu),
            Tensor::randn(&[n, 6], DType::F32, &Device::Cpu),
        ]
    };
    check(
        "two_tower_graph",
        &exported,
        |xs| {
            let (l, r) = towers.forward(&xs[0], &xs[1]);
            vec![l, r]
        },
        &[pair(2, 3), pair(4, 7)],
        1e-4,
    );

    let mut encoder = Encoder::new(&Device::Cpu);
    encoder.eval();
    randomize(&encoder);
    let exported = onnx::network_graph(&encoder).expect("export the encoder");
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&encoder));
    assert!(
        names.contains(&"pre.1.self_attn.in_proj_weight".to_string()),
        "{names:?}"
    );
    let seq = |n: usize, t: usize| vec![Tensor::randn(&[n, t, 32], DType::F32, &Device::Cpu)];
    check(
        "encoder_graph",
        &exported,
        |xs| vec![encoder.forward(&xs[0])],
        &[seq(2, 5), seq(3, 11)],
        1e-4,
    );

    let mut stage = Stage::new(&Device::Cpu);
    stage.eval();
    randomize(&stage);
    let exported = onnx::network_graph(&stage).expect("export the stage");
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&stage));
    assert!(
        names.contains(&"rest.1.down.1.running_mean".to_string()),
        "{names:?}"
    );
    assert_eq!(io_dims(&exported, false, 0), ["N", "8", "H", "W"]);
    let img =
        |n: usize, h: usize, w: usize| vec![Tensor::randn(&[n, 8, h, w], DType::F32, &Device::Cpu)];
    check(
        "stage_graph",
        &exported,
        |xs| vec![stage.forward(&xs[0])],
        &[img(2, 9, 7), img(3, 12, 16)],
        1e-4,
    );
}

#[test]
fn mobilenet_blocks_export_from_their_graphs() {
    use ferrograd::models::vision::mobilenet::{
        InvertedResidual, InvertedResidualDown, InvertedResidualThin, InvertedResidualThinDown,
    };
    manual_seed(13);
    let x =
        |n: usize, c: usize, s: usize| vec![Tensor::randn(&[n, c, s, s], DType::F32, &Device::Cpu)];
    // Depthwise convolutions (`groups` a constructor parameter), nested sequences
    // (`conv.0.1.weight`), ReLU6 as `Clip`, with and without the shortcut.
    fn one<M>(name: &str, mut m: M, sets: &[Vec<Tensor>], nested: &str)
    where
        M: onnx::ExportNetwork + for<'a> Forward<&'a Tensor, Output = Tensor>,
    {
        m.eval();
        randomize(&m);
        let exported = onnx::network_graph(&m).unwrap_or_else(|e| panic!("export {name}: {e}"));
        assert!(exported.op_types().contains(&"Clip".to_string()), "{name}");
        let mut names = params_of(&exported);
        names.sort();
        assert_eq!(names, forward_state(&m), "{name}");
        assert!(names.contains(&nested.to_string()), "{name}: {names:?}");
        check(name, &exported, |xs| vec![m.forward(&xs[0])], sets, 1e-4);
    }
    let cpu = &Device::Cpu;
    one(
        "inverted_residual",
        InvertedResidual::new(cpu, 8, 48),
        &[x(2, 8, 6), x(3, 8, 5)],
        "conv.1.0.weight",
    );
    one(
        "inverted_residual_down",
        InvertedResidualDown::new(cpu, 8, 16, 48, 2),
        &[x(2, 8, 7), x(1, 8, 8)],
        "conv.0.1.running_var",
    );
    one(
        "inverted_residual_thin",
        InvertedResidualThin::new(cpu, 8),
        &[x(2, 8, 6)],
        "conv.0.0.weight",
    );
    one(
        "inverted_residual_thin_down",
        InvertedResidualThinDown::new(cpu, 8, 16, 2),
        &[x(2, 8, 9)],
        "conv.2.weight",
    );
}

#[test]
fn vit_encoder_block_exports_from_its_graph() {
    use ferrograd::models::vision::vit::EncoderBlock;
    manual_seed(14);
    // Number parameters (dropout probabilities) and `LayerNorm(.., eps = 1e-6)`.
    let mut block = EncoderBlock::new(&Device::Cpu, 16, 2, 32, 0.1, 0.1);
    block.eval();
    randomize(&block);
    assert_eq!((block.ln_1.eps, block.dropout.p), (1e-6, 0.1));
    let exported = onnx::network_graph(&block).expect("export the ViT block");
    let mut names = params_of(&exported);
    names.sort();
    assert_eq!(names, forward_state(&block));
    assert_eq!(io_dims(&exported, false, 0), ["N", "T", "16"]);
    let x = |n: usize, t: usize| vec![Tensor::randn(&[n, t, 16], DType::F32, &Device::Cpu)];
    check(
        "vit_encoder_block_graph",
        &exported,
        |xs| vec![block.forward(&xs[0])],
        &[x(2, 5), x(3, 9)],
        1e-4,
    );
}

ferrograd::network! {
    /// A configuration-chosen activation (`act: Activation`, applied as `-> act`).
    pub struct ActMlp[dim, act: Activation](x: [N, dim]) -> [N, dim] {
        x -> c_fc: Linear(dim -> 2 * dim) -> act -> c_proj: Linear(2 * dim -> dim)
    }
}

#[test]
fn activation_parameters_export_by_name() {
    use ferrograd::nn::Activation;
    manual_seed(15);
    for (act, op) in [
        (Activation::Relu, "Relu"),
        (Activation::Gelu, "Erf"),
        (Activation::GeluTanh, "Tanh"),
        (Activation::Silu, "Sigmoid"),
    ] {
        let mlp = ActMlp::new(&Device::Cpu, 6, act);
        let exported = onnx::network_graph(&mlp).expect("export the MLP");
        assert!(exported.op_types().contains(&op.to_string()), "{act:?}");
        let x = |n: usize| vec![Tensor::randn(&[n, 6], DType::F32, &Device::Cpu)];
        check(
            act.name(),
            &exported,
            |xs| vec![mlp.forward(&xs[0])],
            &[x(2), x(5)],
            1e-4,
        );
    }
}
