//! MultiheadAttention and the Transformer layers match PyTorch (fixtures from
//! `tests/fixtures/make_transformer_fixtures.py`): outputs, attention weights and the
//! gradients of every input and parameter, with masks, per-head weights, kdim/vdim,
//! post- and pre-norm encoder and decoder layers and an encoder stack, on every device.

mod common;

use ferrograd::nn::{
    Activation, AttnMasks, LayerNorm, MhaArgs, Module, MultiheadAttention, StateDict,
    TransformerConfig, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
};
use ferrograd::prelude::*;
use ferrograd::testing::test_device;
use std::collections::HashMap;

fn fixtures() -> HashMap<String, Tensor> {
    common::typed_tensors(include_bytes!("fixtures/torch_transformer.safetensors"))
}

use common::close_to_torch as close;

/// A case's inputs (requiring grad where PyTorch gave them a gradient) on `device`.
struct Case<'a> {
    fx: &'a HashMap<String, Tensor>,
    name: &'static str,
    device: Device,
    inputs: HashMap<String, Tensor>,
}

impl<'a> Case<'a> {
    fn new(fx: &'a HashMap<String, Tensor>, name: &'static str, device: &Device) -> Self {
        let prefix = format!("{name}.in.");
        let inputs = fx
            .iter()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix(&prefix)?;
                let t = v.to_device(device).unwrap();
                let grad = fx.contains_key(&format!("{name}.grad.in.{key}"));
                Some((
                    key.to_string(),
                    if grad { t.requires_grad(true) } else { t },
                ))
            })
            .collect();
        Case {
            fx,
            name,
            device: *device,
            inputs,
        }
    }

    fn input(&self, k: &str) -> &Tensor {
        &self.inputs[k]
    }

    fn load(&self, module: &mut impl Module) {
        let prefix = format!("{}.sd.", self.name);
        let sd: StateDict = self
            .fx
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
            .collect();
        module.load_state_dict(&sd, true).unwrap();
        module.eval();
    }

    /// Compares the output, backpropagates PyTorch's upstream gradient and compares every
    /// gradient.
    fn check(&self, module: &impl Module, y: &Tensor, weights: Option<&Tensor>) {
        let (n, d) = (self.name, &self.device);
        close(
            y,
            &self.fx[&format!("{n}.out")],
            &format!("{n} output on {d}"),
        );
        if let Some(w) = weights {
            close(
                w,
                &self.fx[&format!("{n}.weights")],
                &format!("{n} weights on {d}"),
            );
        }
        y.backward_with(&self.fx[&format!("{n}.go")].to_device(d).unwrap());
        for (k, t) in &self.inputs {
            if let Some(g) = self.fx.get(&format!("{n}.grad.in.{k}")) {
                close(&t.grad().unwrap(), g, &format!("{n} d{k} on {d}"));
            }
        }
        for (k, p) in module.named_parameters() {
            let g = &self.fx[&format!("{n}.grad.sd.{k}")];
            close(
                &p.grad().expect("every parameter has a gradient"),
                g,
                &format!("{n} d{k} on {d}"),
            );
        }
    }
}

fn multihead_attention_matches_pytorch(device: &Device) {
    let fx = fixtures();
    let c = Case::new(&fx, "mha_masks", device);
    let mut mha = MultiheadAttention::new(16, 4, device).batch_first(true);
    c.load(&mut mha);
    let (kpm, am) = (
        Tensor::from_vec(
            vec![
                false, false, false, false, false, false, false, false, false, false, false, false,
                true, true,
            ],
            &[2, 7],
        )
        .to_device(device)
        .unwrap(),
        Tensor::from_vec(
            (0..35).map(|i| (3..7).contains(&i)).collect::<Vec<bool>>(),
            &[5, 7],
        )
        .to_device(device)
        .unwrap(),
    );
    let args = MhaArgs {
        key_padding_mask: Some(&kpm),
        attn_mask: Some(&am),
        need_weights: true,
        average_attn_weights: true,
        is_causal: false,
    };
    let (y, w) = mha.forward_with(c.input("q"), c.input("k"), c.input("v"), &args);
    c.check(&mha, &y, w.as_ref());

    let c = Case::new(&fx, "mha_float_per_head", device);
    let mut mha = MultiheadAttention::new(16, 4, device).batch_first(true);
    c.load(&mut mha);
    let args = MhaArgs {
        attn_mask: Some(c.input("attn_mask")),
        need_weights: true,
        average_attn_weights: false,
        ..MhaArgs::default()
    };
    let (y, w) = mha.forward_with(c.input("q"), c.input("k"), c.input("v"), &args);
    c.check(&mha, &y, w.as_ref());

    let c = Case::new(&fx, "mha_kvdim", device);
    let mut mha = MultiheadAttention::with_options(16, 2, 0.0, true, Some(10), Some(6), device);
    c.load(&mut mha);
    let args = MhaArgs {
        key_padding_mask: Some(&kpm),
        ..MhaArgs::default()
    };
    let (y, _) = mha.forward_with(c.input("q"), c.input("k"), c.input("v"), &args);
    c.check(&mha, &y, None);
}
test_device!(multihead_attention_matches_pytorch);

/// PyTorch's `generate_square_subsequent_mask(6)`: 0 on and below the diagonal, -inf above.
fn causal_float(device: &Device) -> Tensor {
    let v: Vec<f32> = (0..36)
        .map(|i| {
            if i % 6 > i / 6 {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(v, &[6, 6]).to_device(device).unwrap()
}

fn transformer_layers_match_pytorch(device: &Device) {
    let fx = fixtures();
    let causal = causal_float(device);
    let kpm6 = Tensor::from_vec((0..12).map(|i| i == 11).collect::<Vec<bool>>(), &[2, 6])
        .to_device(device)
        .unwrap();
    for (name, norm_first, act) in [
        ("enc_post_gelu", false, Activation::Gelu),
        ("enc_pre_relu", true, Activation::Relu),
    ] {
        let c = Case::new(&fx, name, device);
        let cfg = TransformerConfig::new(16, 4)
            .dim_feedforward(32)
            .dropout(0.0)
            .activation(act)
            .batch_first(true)
            .norm_first(norm_first);
        let mut layer = TransformerEncoderLayer::new(cfg, device);
        c.load(&mut layer);
        let masks = AttnMasks {
            mask: Some(&causal),
            key_padding_mask: Some(&kpm6),
            is_causal: false,
        };
        let y = layer.forward_with(c.input("src"), &masks);
        c.check(&layer, &y, None);
    }
    let mem_kpm = Tensor::from_vec((0..14).map(|i| i == 6).collect::<Vec<bool>>(), &[2, 7])
        .to_device(device)
        .unwrap();
    for (name, norm_first) in [("dec_post", false), ("dec_pre", true)] {
        let c = Case::new(&fx, name, device);
        let cfg = TransformerConfig::new(16, 4)
            .dim_feedforward(32)
            .dropout(0.0)
            .batch_first(true)
            .norm_first(norm_first);
        let mut layer = TransformerDecoderLayer::new(cfg, device);
        c.load(&mut layer);
        let tgt_masks = AttnMasks {
            mask: Some(&causal),
            ..AttnMasks::default()
        };
        let memory_masks = AttnMasks {
            key_padding_mask: Some(&mem_kpm),
            ..AttnMasks::default()
        };
        let y = layer.forward_with(c.input("tgt"), c.input("memory"), &tgt_masks, &memory_masks);
        c.check(&layer, &y, None);
    }
    let c = Case::new(&fx, "encoder_stack", device);
    let cfg = TransformerConfig::new(16, 2)
        .dim_feedforward(24)
        .dropout(0.0);
    let mut enc = TransformerEncoder::new(cfg, 2, true, device);
    c.load(&mut enc);
    let y = enc.forward(c.input("src"));
    c.check(&enc, &y, None);
    let _ = LayerNorm::new(&[16], device);
}
test_device!(transformer_layers_match_pytorch);

/// `is_causal` without a mask equals the explicit causal mask.
#[test]
fn the_causal_hint_equals_the_causal_mask() {
    manual_seed(4);
    let mut layer = TransformerEncoderLayer::new(
        TransformerConfig::new(8, 2).dim_feedforward(16),
        &Device::Cpu,
    );
    layer.eval();
    let x = Tensor::randn(&[6, 3, 8], DType::F32, &Device::Cpu);
    let a = layer.forward_with(&x, &AttnMasks::causal());
    let mask = causal_float(&Device::Cpu);
    let b = layer.forward_with(
        &x,
        &AttnMasks {
            mask: Some(&mask),
            ..AttnMasks::default()
        },
    );
    ferrograd::testing::assert_close(&a, &b, DType::F32);
}
