//! The single-step cells `nn.RNNCell`, `nn.LSTMCell` and `nn.GRUCell`.

use crate::nn::Module;
use crate::nn::functional as F;
use crate::nn::init::default_uniform;
use crate::{Device, Tensor};

macro_rules! cell {
    ($(#[$m:meta])* $name:ident, $gates:literal, $ctor_doc:literal) => {
        $(#[$m])*
        #[derive(Module, Debug)]
        #[module(crate = crate)]
        pub struct $name {
            /// Input weights `[gates * hidden, input]`.
            #[param]
            pub weight_ih: Tensor,
            /// Hidden weights `[gates * hidden, hidden]`.
            #[param]
            pub weight_hh: Tensor,
            /// Input bias.
            #[param]
            pub bias_ih: Option<Tensor>,
            /// Hidden bias.
            #[param]
            pub bias_hh: Option<Tensor>,
        }

        impl $name {
            #[doc = $ctor_doc]
            pub fn new(input_size: usize, hidden_size: usize, bias: bool, device: &Device) -> Self {
                let g = $gates * hidden_size;
                let p = |shape: &[usize]| default_uniform(shape, hidden_size, device);
                $name {
                    weight_ih: p(&[g, input_size]),
                    weight_hh: p(&[g, hidden_size]),
                    bias_ih: bias.then(|| p(&[g])),
                    bias_hh: bias.then(|| p(&[g])),
                }
            }

            fn zeros(&self, x: &Tensor) -> Tensor {
                let n = if x.dim() == 2 { vec![x.size(0)] } else { vec![] };
                let mut shape = n;
                shape.push(self.weight_hh.size(1));
                Tensor::zeros(&shape, x.dtype(), &x.device())
            }
        }
    };
}

cell! {
    /// One step of an Elman RNN (`nn.RNNCell`, tanh): `h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::RNNCell;
    /// let cell = RNNCell::new(3, 4, true, &Device::Cpu);
    /// assert_eq!(cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None).shape(), &[2, 4]);
    /// ```
    RNNCell, 1, "A cell from `input_size` to `hidden_size` features."
}

cell! {
    /// One LSTM step (`nn.LSTMCell`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::LSTMCell;
    /// let cell = LSTMCell::new(3, 4, true, &Device::Cpu);
    /// let (h, c) = cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None);
    /// assert_eq!((h.shape(), c.shape()), (&[2, 4][..], &[2, 4][..]));
    /// ```
    LSTMCell, 4, "A cell from `input_size` to `hidden_size` features."
}

cell! {
    /// One GRU step (`nn.GRUCell`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::GRUCell;
    /// let cell = GRUCell::new(3, 4, true, &Device::Cpu);
    /// assert_eq!(cell.forward(&Tensor::randn(&[2, 3], DType::F32, &Device::Cpu), None).shape(), &[2, 4]);
    /// ```
    GRUCell, 3, "A cell from `input_size` to `hidden_size` features."
}

impl RNNCell {
    /// `h'` from input `x` (`[N, in]` or `[in]`) and `h` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, h: Option<&Tensor>) -> Tensor {
        let h = h.cloned().unwrap_or_else(|| self.zeros(x));
        F::linear(x, &self.weight_ih, self.bias_ih.as_ref())
            .add(&F::linear(&h, &self.weight_hh, self.bias_hh.as_ref()))
            .tanh()
    }
}

impl LSTMCell {
    /// `(h', c')` from input `x` and the state `(h, c)` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, state: Option<(&Tensor, &Tensor)>) -> (Tensor, Tensor) {
        let (h, c) = match state {
            Some((h, c)) => (h.clone(), c.clone()),
            None => (self.zeros(x), self.zeros(x)),
        };
        let gates = F::linear(x, &self.weight_ih, self.bias_ih.as_ref()).add(&F::linear(
            &h,
            &self.weight_hh,
            self.bias_hh.as_ref(),
        ));
        let g = gates.chunk(4, -1);
        let (i, f, gg, o) = (g[0].sigmoid(), g[1].sigmoid(), g[2].tanh(), g[3].sigmoid());
        let c_new = f.mul(&c).add(&i.mul(&gg));
        (o.mul(&c_new.tanh()), c_new)
    }
}

impl GRUCell {
    /// `h'` from input `x` and `h` (zeros when `None`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor, h: Option<&Tensor>) -> Tensor {
        let h = h.cloned().unwrap_or_else(|| self.zeros(x));
        let xg = F::linear(x, &self.weight_ih, self.bias_ih.as_ref()).chunk(3, -1);
        let hg = F::linear(&h, &self.weight_hh, self.bias_hh.as_ref()).chunk(3, -1);
        let r = xg[0].add(&hg[0]).sigmoid();
        let z = xg[1].add(&hg[1]).sigmoid();
        let n = xg[2].add(&r.mul(&hg[2])).tanh();
        n.add(&z.mul(&h.sub(&n)))
    }
}
