//! `#[derive(Module)]`: PyTorch-style names from one traversal, state dicts, modes.

use ferrograd::nn::{BatchNorm1d, Dropout, Linear, Module, StateDict};
use ferrograd::prelude::*;

#[derive(Module)]
struct Attention {
    qkv: Linear,
    #[param]
    scale: Tensor,
}

#[derive(Module)]
struct Block {
    attn: Attention,
    norm: Option<BatchNorm1d>,
    dropout: Dropout,
    #[module(skip)]
    name: String,
}

#[derive(Module)]
struct Model {
    embed: Box<Linear>,
    blocks: Vec<Block>,
    heads: [Linear; 2],
    missing: Option<Linear>,
    #[buffer]
    step: Tensor,
    #[module(training)]
    training: bool,
}

fn block(device: &Device) -> Block {
    Block {
        attn: Attention {
            qkv: Linear::new(4, 12, device),
            scale: Tensor::ones(&[1], DType::F32, device).requires_grad(true),
        },
        norm: Some(BatchNorm1d::new(4, device)),
        dropout: Dropout::new(0.1),
        name: "block".into(),
    }
}

fn model() -> Model {
    let cpu = Device::Cpu;
    Model {
        embed: Box::new(Linear::new(3, 4, &cpu)),
        blocks: vec![block(&cpu), block(&cpu)],
        heads: [Linear::new(4, 2, &cpu), Linear::no_bias(4, 1, &cpu)],
        missing: None,
        step: Tensor::zeros(&[], DType::I64, &cpu),
        training: true,
    }
}

#[test]
fn names_follow_pytorch_conventions() {
    let m = model();
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "embed.weight",
            "embed.bias",
            "blocks.0.attn.qkv.weight",
            "blocks.0.attn.qkv.bias",
            "blocks.0.attn.scale",
            "blocks.0.norm.weight",
            "blocks.0.norm.bias",
            "blocks.1.attn.qkv.weight",
            "blocks.1.attn.qkv.bias",
            "blocks.1.attn.scale",
            "blocks.1.norm.weight",
            "blocks.1.norm.bias",
            "heads.0.weight",
            "heads.0.bias",
            "heads.1.weight",
        ]
    );
    let buffers: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        buffers,
        [
            "blocks.0.norm.running_mean",
            "blocks.0.norm.running_var",
            "blocks.0.norm.num_batches_tracked",
            "blocks.1.norm.running_mean",
            "blocks.1.norm.running_var",
            "blocks.1.norm.num_batches_tracked",
            "step"
        ]
    );
    assert_eq!(
        m.num_parameters(),
        3 * 4 + 4 + 2 * (4 * 12 + 12 + 1 + 4 + 4) + 4 * 2 + 2 + 4
    );
    assert_eq!(m.state_dict().len(), names.len() + buffers.len());
}

#[test]
fn train_and_eval_reach_every_child() {
    let mut m = model();
    m.eval();
    assert!(
        !m.training
            && m.blocks
                .iter()
                .all(|b| !b.dropout.training && !b.norm.as_ref().unwrap().training)
    );
    m.train();
    assert!(
        m.training
            && m.blocks
                .iter()
                .all(|b| b.dropout.training && b.norm.as_ref().unwrap().training)
    );
    assert_eq!(m.blocks[0].name, "block");
}

#[test]
fn state_dict_round_trips_into_a_fresh_model() {
    let a = model();
    let mut b = model();
    let handle = b.heads[0].weight.clone();
    b.load_state_dict(&a.state_dict(), true).unwrap();
    for ((name, x), (_, y)) in a.state_dict().iter().zip(b.state_dict().iter()) {
        assert_eq!(
            x.to_dtype(DType::F64).to_vec::<f64>(),
            y.to_dtype(DType::F64).to_vec::<f64>(),
            "{name}"
        );
    }
    // Loaded in place, as PyTorch does: handles held elsewhere (optimizers) see the values.
    assert_eq!(handle.to_vec::<f32>(), a.heads[0].weight.to_vec::<f32>());
    assert!(b.heads[0].weight.requires_grad_flag() && b.heads[0].weight.is_leaf());
}

#[test]
fn load_state_dict_reports_missing_unexpected_and_mismatched_keys() {
    let mut m = model();
    let mut state: StateDict = m.state_dict();
    state.remove("heads.1.weight");
    state.insert(
        "heads.2.weight".into(),
        Tensor::zeros(&[1], DType::F32, &Device::Cpu),
    );
    state.insert(
        "embed.bias".into(),
        Tensor::zeros(&[5], DType::F32, &Device::Cpu),
    );
    let before = m.embed.weight.to_vec::<f32>();
    let err = m.load_state_dict(&state, true).unwrap_err();
    assert_eq!(err.missing, ["heads.1.weight"]);
    assert_eq!(err.unexpected, ["heads.2.weight"]);
    assert_eq!(
        err.mismatched,
        [("embed.bias".to_string(), vec![4], vec![5])]
    );
    let message = err.to_string();
    assert!(
        message.contains("missing key(s): heads.1.weight")
            && message.contains("size mismatch for embed.bias"),
        "{message}"
    );
    assert_eq!(
        m.embed.weight.to_vec::<f32>(),
        before,
        "a failed load modifies nothing"
    );
    // Non-strict: shape mismatches still fail, missing/unexpected are reported.
    state.insert(
        "embed.bias".into(),
        Tensor::zeros(&[4], DType::F32, &Device::Cpu),
    );
    let report = m.load_state_dict(&state, false).unwrap();
    assert_eq!((report.missing.len(), report.unexpected.len()), (1, 1));
    assert_eq!(m.embed.bias.as_ref().unwrap().to_vec::<f32>(), vec![0.0; 4]);
}

#[test]
fn to_dtype_and_zero_grad_reach_every_tensor() {
    let mut m = model();
    let x = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
    m.heads[0]
        .forward(&m.embed.forward(&x))
        .sum_all()
        .backward();
    assert!(m.embed.weight.grad().is_some());
    m.zero_grad();
    assert!(m.parameters().iter().all(|p| p.grad().is_none()));
    m.to_dtype(DType::F64);
    assert!(
        m.parameters()
            .iter()
            .all(|p| p.dtype() == DType::F64 && p.requires_grad_flag())
    );
    assert_eq!(
        m.step.dtype(),
        DType::I64,
        "integer buffers keep their dtype"
    );
    m.to_device(&Device::Cpu).unwrap();
    assert_eq!(m.device(), Some(Device::Cpu));
}

#[derive(Module)]
struct Pair(Linear, #[module(skip)] usize);

#[derive(Module)]
struct Stack<M> {
    layers: Vec<M>,
}

#[test]
fn tuple_and_generic_structs() {
    let p = Pair(Linear::new(2, 2, &Device::Cpu), 7);
    assert_eq!(p.1, 7);
    assert_eq!(
        p.state_dict().keys().cloned().collect::<Vec<_>>(),
        ["0.bias", "0.weight"]
    );
    let s = Stack {
        layers: vec![
            Linear::new(2, 2, &Device::Cpu),
            Linear::new(2, 2, &Device::Cpu),
        ],
    };
    assert_eq!(s.named_parameters()[2].0, "layers.1.weight");
}

#[derive(Module)]
struct Renamed {
    #[module(rename = "self")]
    self_attn: Linear,
    #[module(rename = "LayerNorm")]
    #[param]
    layer_norm: Tensor,
}

#[test]
fn a_renamed_field_takes_the_checkpoint_key() {
    let m = Renamed {
        self_attn: Linear::new(2, 2, &Device::Cpu),
        layer_norm: Tensor::ones(&[2], DType::F32, &Device::Cpu),
    };
    let keys: Vec<String> = m.state_dict().keys().cloned().collect();
    assert_eq!(keys, ["LayerNorm", "self.bias", "self.weight"]);
    let mut other = Renamed {
        self_attn: Linear::new(2, 2, &Device::Cpu),
        layer_norm: Tensor::zeros(&[2], DType::F32, &Device::Cpu),
    };
    other.load_state_dict(&m.state_dict(), true).unwrap();
    assert_eq!(other.layer_norm.to_vec::<f32>(), [1.0, 1.0]);
}
