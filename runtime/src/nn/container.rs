//! Containers whose children are named by position or key, as PyTorch's:
//! [`Sequential`] (a chain with a forward), [`ModuleList`] and [`ModuleDict`].

use super::forward::{Forward, Layer};
use super::{Module, TensorKind, join_path};
use crate::Tensor;
use std::ops::{Index, IndexMut};

/// Layers applied in order (`nn.Sequential`); state-dict keys are the positions, as
/// PyTorch's (`0.weight`, and `1.0.bias` for a nested one).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module, ReLU, Sequential};
/// let mlp = Sequential::new()
///     .append(Linear::new(4, 8, &Device::Cpu))
///     .append(ReLU)
///     .append(Sequential::new().append(Linear::new(8, 2, &Device::Cpu)));
/// let keys: Vec<String> = mlp.state_dict().into_keys().collect();
/// assert_eq!(keys, ["0.bias", "0.weight", "2.0.bias", "2.0.weight"]);
/// let y = mlp.forward(&Tensor::ones(&[3, 4], DType::F32, &Device::Cpu));
/// assert_eq!(y.shape(), &[3, 2]);
/// assert_eq!(mlp.len(), 3);
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// An empty chain (its forward is the identity).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// assert!(Sequential::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Sequential::default()
    }

    /// This chain with `layer` appended (`Sequential.append`, which returns the chain;
    /// [`Sequential::push`] appends in place).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// let net = Sequential::new().append(Linear::new(2, 3, &Device::Cpu)).append(ReLU);
    /// assert_eq!(net.len(), 2);
    /// ```
    pub fn append(mut self, layer: impl Layer + 'static) -> Self {
        self.push(layer);
        self
    }

    /// Appends `layer` (`Sequential.append`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// let mut net = Sequential::new();
    /// net.push(ReLU);
    /// assert_eq!(net.len(), 1);
    /// ```
    pub fn push(&mut self, layer: impl Layer + 'static) {
        self.layers.push(Box::new(layer));
    }

    /// Appends an already boxed layer.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// use ferrograd_runtime::nn::Layer;
    /// let layer: Box<dyn Layer> = Box::new(ReLU);
    /// let mut net = Sequential::new();
    /// net.push_boxed(layer);
    /// assert_eq!(net.len(), 1);
    /// ```
    pub fn push_boxed(&mut self, layer: Box<dyn Layer>) {
        self.layers.push(layer);
    }

    /// How many layers.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// assert_eq!(Sequential::new().append(ReLU).len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// assert!(!Sequential::new().append(ReLU).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `index`, if there is one.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// use ferrograd_runtime::nn::Module;
    /// let net = Sequential::new().append(Linear::new(2, 3, &Device::Cpu));
    /// assert_eq!(net.get(0).unwrap().num_parameters(), 9);
    /// assert!(net.get(1).is_none());
    /// ```
    pub fn get(&self, index: usize) -> Option<&dyn Layer> {
        self.layers.get(index).map(|l| &**l)
    }

    /// Layer `index` for changing it, if there is one.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// use ferrograd_runtime::nn::Module;
    /// let mut net = Sequential::new().append(Linear::new(2, 3, &Device::Cpu));
    /// net.get_mut(0).unwrap().eval();
    /// ```
    pub fn get_mut(&mut self, index: usize) -> Option<&mut (dyn Layer + 'static)> {
        self.layers.get_mut(index).map(|l| &mut **l)
    }

    /// The layers in order.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// use ferrograd_runtime::nn::Module;
    /// let net = Sequential::new().append(Linear::new(2, 3, &Device::Cpu)).append(ReLU);
    /// let counts: Vec<usize> = net.iter().map(|l| l.num_parameters()).collect();
    /// assert_eq!(counts, [9, 0]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = &dyn Layer> {
        self.layers.iter().map(|l| &**l)
    }

    /// Applies the layers in order (the inherent form of [`Forward::forward`]).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ReLU, Sequential};
    /// let net = Sequential::new().append(Linear::new(2, 3, &Device::Cpu)).append(ReLU);
    /// let y = net.forward(&Tensor::ones(&[4, 2], DType::F32, &Device::Cpu));
    /// assert_eq!(y.shape(), &[4, 3]);
    /// ```
    #[track_caller]
    pub fn forward(&self, input: &Tensor) -> Tensor {
        let mut layers = self.layers.iter();
        let Some(first) = layers.next() else {
            return input.clone();
        };
        layers.fold(first.forward(input), |x, layer| layer.forward(&x))
    }
}

impl FromIterator<Box<dyn Layer>> for Sequential {
    fn from_iter<I: IntoIterator<Item = Box<dyn Layer>>>(iter: I) -> Self {
        Sequential {
            layers: iter.into_iter().collect(),
        }
    }
}

impl Index<usize> for Sequential {
    type Output = dyn Layer;
    #[track_caller]
    fn index(&self, index: usize) -> &(dyn Layer + 'static) {
        &*self.layers[index]
    }
}

impl IndexMut<usize> for Sequential {
    #[track_caller]
    fn index_mut(&mut self, index: usize) -> &mut (dyn Layer + 'static) {
        &mut *self.layers[index]
    }
}

impl<'a> Forward<&'a Tensor> for Sequential {
    type Output = Tensor;
    #[track_caller]
    fn forward(&self, input: &'a Tensor) -> Tensor {
        Sequential::forward(self, input)
    }
}

impl Module for Sequential {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        self.layers.visit(prefix, f);
    }

    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        self.layers.visit_mut(prefix, f);
    }

    fn set_training(&mut self, training: bool) {
        self.layers.set_training(training);
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        f(self);
        self.layers.for_each_module_mut(f);
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

/// Modules held by position, without a forward of their own (`nn.ModuleList`); keys
/// `0.weight`, `1.weight`, ...
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module, ModuleList};
/// let blocks: ModuleList<Linear> = (0..3).map(|_| Linear::new(4, 4, &Device::Cpu)).collect();
/// let x = Tensor::ones(&[1, 4], DType::F32, &Device::Cpu);
/// let y = blocks.iter().fold(x, |x, b| b.forward(&x).relu());
/// assert_eq!(y.shape(), &[1, 4]);
/// assert!(blocks.state_dict().contains_key("2.bias"));
/// ```
pub struct ModuleList<M: Module = Box<dyn Layer>> {
    items: Vec<M>,
}

impl<M: Module + std::fmt::Debug> std::fmt::Debug for ModuleList<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.items).finish()
    }
}

impl<M: Module> Default for ModuleList<M> {
    fn default() -> Self {
        ModuleList { items: Vec::new() }
    }
}

impl<M: Module> ModuleList<M> {
    /// An empty list.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// let list: ModuleList<Linear> = ModuleList::new();
    /// assert!(list.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `module` (`ModuleList.append`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// let mut list = ModuleList::new();
    /// list.push(Linear::new(2, 2, &Device::Cpu));
    /// assert_eq!(list.len(), 1);
    /// ```
    pub fn push(&mut self, module: M) {
        self.items.push(module);
    }

    /// How many modules.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// let list: ModuleList<Linear> = (0..3).map(|_| Linear::new(2, 2, &Device::Cpu)).collect();
    /// assert_eq!(list.len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// assert!(ModuleList::<Linear>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The modules in order.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// let list: ModuleList<Linear> = (0..2).map(|_| Linear::new(2, 2, &Device::Cpu)).collect();
    /// assert_eq!(list.iter().count(), 2);
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, M> {
        self.items.iter()
    }

    /// The modules in order, for changing them.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleList};
    /// let mut list: ModuleList<Linear> = (0..2).map(|_| Linear::new(2, 2, &Device::Cpu)).collect();
    /// for l in list.iter_mut() { l.bias = None; }
    /// assert!(list[1].bias.is_none());
    /// ```
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, M> {
        self.items.iter_mut()
    }
}

impl<M: Module> FromIterator<M> for ModuleList<M> {
    fn from_iter<I: IntoIterator<Item = M>>(iter: I) -> Self {
        ModuleList {
            items: iter.into_iter().collect(),
        }
    }
}

impl<M: Module> Index<usize> for ModuleList<M> {
    type Output = M;
    #[track_caller]
    fn index(&self, index: usize) -> &M {
        &self.items[index]
    }
}

impl<M: Module> IndexMut<usize> for ModuleList<M> {
    #[track_caller]
    fn index_mut(&mut self, index: usize) -> &mut M {
        &mut self.items[index]
    }
}

impl<M: Module> Module for ModuleList<M> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        self.items.visit(prefix, f);
    }

    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        self.items.visit_mut(prefix, f);
    }

    fn set_training(&mut self, training: bool) {
        self.items.set_training(training);
    }

    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        self.items.for_each_module_mut(f);
    }
}

/// Modules held by name in insertion order (`nn.ModuleDict`); keys `name.weight`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module, ModuleDict};
/// let mut heads: ModuleDict<Linear> = ModuleDict::new();
/// heads.insert("cls", Linear::new(8, 10, &Device::Cpu));
/// heads.insert("box", Linear::new(8, 4, &Device::Cpu));
/// assert_eq!(heads.keys().collect::<Vec<_>>(), ["cls", "box"]);
/// assert_eq!(heads["box"].forward(&Tensor::ones(&[2, 8], DType::F32, &Device::Cpu)).shape(), &[2, 4]);
/// assert!(heads.state_dict().contains_key("cls.weight"));
/// ```
pub struct ModuleDict<M: Module = Box<dyn Layer>> {
    items: Vec<(String, M)>,
}

impl<M: Module> Default for ModuleDict<M> {
    fn default() -> Self {
        ModuleDict { items: Vec::new() }
    }
}

impl<M: Module> ModuleDict<M> {
    /// An empty dict.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let dict: ModuleDict<Linear> = ModuleDict::new();
    /// assert!(dict.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `module`, returning the module it replaces (keeping its position),
    /// as assignment to a `ModuleDict` key does.
    ///
    /// # Panics
    /// When `name` is empty or contains a `.` (it would split the state-dict key).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// assert!(dict.insert("head", Linear::new(2, 2, &Device::Cpu)).is_none());
    /// assert!(dict.insert("head", Linear::new(2, 2, &Device::Cpu)).is_some());
    /// ```
    #[track_caller]
    pub fn insert(&mut self, name: impl Into<String>, module: M) -> Option<M> {
        let name = name.into();
        assert!(
            !name.is_empty() && !name.contains('.'),
            "ModuleDict.insert: module name can't be empty or contain \".\", got {name:?}"
        );
        match self.items.iter_mut().find(|(n, _)| *n == name) {
            Some((_, old)) => Some(std::mem::replace(old, module)),
            None => {
                self.items.push((name, module));
                None
            }
        }
    }

    /// The module named `name`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("head", Linear::new(2, 2, &Device::Cpu));
    /// assert!(dict.get("head").is_some() && dict.get("tail").is_none());
    /// ```
    pub fn get(&self, name: &str) -> Option<&M> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// The module named `name`, for changing it.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("head", Linear::new(2, 2, &Device::Cpu));
    /// dict.get_mut("head").unwrap().bias = None;
    /// ```
    pub fn get_mut(&mut self, name: &str) -> Option<&mut M> {
        self.items
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
    }

    /// Removes and returns the module named `name` (`ModuleDict.pop`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("head", Linear::new(2, 2, &Device::Cpu));
    /// assert!(dict.remove("head").is_some() && dict.is_empty());
    /// ```
    pub fn remove(&mut self, name: &str) -> Option<M> {
        let i = self.items.iter().position(|(n, _)| n == name)?;
        Some(self.items.remove(i).1)
    }

    /// The names in insertion order.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("b", Linear::new(2, 2, &Device::Cpu));
    /// dict.insert("a", Linear::new(2, 2, &Device::Cpu));
    /// assert_eq!(dict.keys().collect::<Vec<_>>(), ["b", "a"]);
    /// ```
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|(n, _)| n.as_str())
    }

    /// `(name, module)` pairs in insertion order.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("a", Linear::new(2, 2, &Device::Cpu));
    /// assert_eq!(dict.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["a"]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&str, &M)> {
        self.items.iter().map(|(n, m)| (n.as_str(), m))
    }

    /// How many modules.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// let mut dict = ModuleDict::new();
    /// dict.insert("a", Linear::new(2, 2, &Device::Cpu));
    /// assert_eq!(dict.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Linear, ModuleDict};
    /// assert!(ModuleDict::<Linear>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<M: Module> Index<&str> for ModuleDict<M> {
    type Output = M;
    #[track_caller]
    fn index(&self, name: &str) -> &M {
        self.get(name)
            .unwrap_or_else(|| panic!("ModuleDict: no module named {name:?}"))
    }
}

impl<M: Module> Module for ModuleDict<M> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        for (name, m) in &self.items {
            m.visit(&join_path(prefix, name), f);
        }
    }

    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        for (name, m) in &mut self.items {
            m.visit_mut(&join_path(prefix, name), f);
        }
    }

    fn set_training(&mut self, training: bool) {
        for (_, m) in &mut self.items {
            m.set_training(training);
        }
    }

    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        for (_, m) in &mut self.items {
            m.for_each_module_mut(f);
        }
    }
}
