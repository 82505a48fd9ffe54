//! Messages that name a request's arguments by kind ([`Arg`]), so that each face words them
//! its own way: the command line as flags (`--devices nnapi,cpu`), Python as the keyword
//! arguments that do the same (`devices=["nnapi", "cpu"]`). A message is built of pieces, never
//! parsed back from text.

use std::fmt;

/// An argument of a partition, run or serve request, by what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arg {
    Devices,
    Rules,
    Default,
    Profiles,
    Shape,
    Dim,
    Memory,
    Stages,
    Context,
    Batch,
    State,
    Costs,
    Objective,
    Optimize,
    Margin,
    Engines,
    ExternalData,
    Algorithm,
    LearnDims,
    Input,
    Temperature,
    TopP,
}

/// Who words a message: the command line or the Python package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    Cli,
    Python,
}

/// How an argument's value is written in Python.
#[derive(Clone, Copy)]
enum Shape {
    /// `a,b` → `["a", "b"]`.
    List,
    /// `k=v,k=v` → `{"k": "v"}`; numbers bare when `numbers`.
    Map { numbers: bool },
    /// `name=1,2` → `{"name": (1, 2)}`.
    Dims,
    /// A number or a placeholder (`N`), bare.
    Number,
    /// Text, quoted.
    Text,
}

impl Arg {
    /// The command line's flag.
    pub fn flag(self) -> &'static str {
        self.words().0
    }

    /// Python's keyword argument; none where only the command line has the argument.
    pub fn keyword(self) -> Option<&'static str> {
        self.words().1
    }

    fn words(self) -> (&'static str, Option<&'static str>, Shape) {
        use Shape::*;
        match self {
            Arg::Devices => ("--devices", Some("devices"), List),
            Arg::Rules => ("--rules", Some("rules"), Text),
            Arg::Default => ("--default", Some("default"), Text),
            Arg::Profiles => ("--profile", Some("profiles"), List),
            Arg::Shape => ("--shape", Some("shape"), Dims),
            Arg::Dim => ("--dim", Some("dim"), Map { numbers: true }),
            Arg::Memory => ("--memory", Some("memory"), Map { numbers: false }),
            Arg::Stages => ("--stages", Some("stages"), Number),
            Arg::Context => ("--context", Some("context"), Number),
            Arg::Batch => ("--batch", Some("batch"), Number),
            Arg::State => ("--state", Some("state"), Map { numbers: false }),
            Arg::Costs => ("--costs", Some("costs"), Text),
            Arg::Objective => ("--objective", Some("objective"), Text),
            Arg::Optimize => ("--optimize", Some("optimize"), Text),
            Arg::Margin => ("--margin", Some("margin"), Number),
            Arg::Engines => ("--engine", Some("engines"), Map { numbers: false }),
            Arg::ExternalData => ("--external-data", Some("external_data"), Text),
            Arg::Algorithm => ("--algorithm", Some("algorithm"), Text),
            Arg::LearnDims => ("--learn-dims", None, Text),
            Arg::Input => ("--input", None, Map { numbers: false }),
            Arg::Temperature => ("--temperature", Some("temperature"), Number),
            Arg::TopP => ("--top-p", Some("top_p"), Number),
        }
    }

    /// The argument alone, as `face` names it (`--memory`, `memory=`).
    pub fn named(self, face: Face) -> String {
        match (face, self.keyword()) {
            (Face::Python, Some(k)) => format!("{k}="),
            _ => self.flag().to_string(),
        }
    }

    /// The argument given `value` as the command line writes it (`nnapi,cpu`), worded for
    /// `face`.
    pub fn given(self, value: &str, face: Face) -> String {
        match (face, self.keyword()) {
            (Face::Python, Some(k)) => format!("{k}={}", python_value(self.words().2, value)),
            _ => format!("{} {value}", self.flag()),
        }
    }
}

fn python_value(shape: Shape, v: &str) -> String {
    let quoted = |s: &str| format!("\"{s}\"");
    let bare_or_quoted = |s: &str| {
        if s.parse::<f64>().is_ok() || s.chars().all(|c| c.is_ascii_uppercase()) {
            s.to_string()
        } else {
            quoted(s)
        }
    };
    match shape {
        Shape::List => {
            let items: Vec<String> = v.split(',').map(quoted).collect();
            format!("[{}]", items.join(", "))
        }
        Shape::Dims => match v.split_once('=') {
            Some((name, dims)) => {
                let dims: Vec<&str> = dims.split(',').collect();
                match dims.as_slice() {
                    [one] => format!("{{\"{name}\": ({one},)}}"),
                    _ => format!("{{\"{name}\": ({})}}", dims.join(", ")),
                }
            }
            None => quoted(v),
        },
        Shape::Map { numbers } => {
            let pairs: Vec<String> = v
                .split(',')
                .map(|p| match p.split_once('=') {
                    Some((k, x)) if numbers => format!("\"{k}\": {}", bare_or_quoted(x)),
                    Some((k, x)) => format!("\"{k}\": \"{x}\""),
                    None => quoted(p),
                })
                .collect();
            format!("{{{}}}", pairs.join(", "))
        }
        Shape::Number => bare_or_quoted(v),
        Shape::Text => quoted(v),
    }
}

/// One piece of a [`Message`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// An argument named alone.
    Arg(Arg),
    /// An argument with a value, as the command line writes the value.
    Given(Arg, String),
}

/// A message whose arguments each face words in its own terms; `Display` is the command
/// line's wording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pieces: Vec<Piece>,
}

impl Message {
    /// Plain text.
    pub fn text(s: impl Into<String>) -> Message {
        Message {
            pieces: vec![Piece::Text(s.into())],
        }
    }

    /// `self`, then more text.
    pub fn then(mut self, s: impl Into<String>) -> Message {
        self.pieces.push(Piece::Text(s.into()));
        self
    }

    /// `self`, then the argument named alone.
    pub fn arg(mut self, a: Arg) -> Message {
        self.pieces.push(Piece::Arg(a));
        self
    }

    /// `self`, then the argument with `value` (in the command line's spelling).
    pub fn given(mut self, a: Arg, value: impl Into<String>) -> Message {
        self.pieces.push(Piece::Given(a, value.into()));
        self
    }

    /// A message that starts with the argument with `value`, then `rest`
    /// (`--memory 'x': ...`).
    pub fn about(a: Arg, value: impl Into<String>, rest: impl Into<String>) -> Message {
        Message::default().given(a, value).then(rest)
    }

    /// A message that starts with the argument named alone, then `rest`.
    pub fn about_arg(a: Arg, rest: impl Into<String>) -> Message {
        Message::default().arg(a).then(rest)
    }

    /// `self`, then `more`.
    pub fn extend(&mut self, more: Message) {
        self.pieces.extend(more.pieces);
    }

    /// The message as `face` words it.
    pub fn worded(&self, face: Face) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Arg(a) => out.push_str(&a.named(face)),
                Piece::Given(a, v) => out.push_str(&a.given(v, face)),
            }
        }
        out
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.worded(Face::Cli))
    }
}

impl From<String> for Message {
    fn from(s: String) -> Message {
        Message::text(s)
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Message {
        Message::text(s)
    }
}

impl From<&String> for Message {
    fn from(s: &String) -> Message {
        Message::text(s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::{Arg, Face, Message};

    #[test]
    fn each_face_words_the_arguments_its_own_way() {
        let cases = [
            (
                Message::text("add a fallback device that supports it, e.g. ")
                    .given(Arg::Devices, "nnapi,cpu"),
                "add a fallback device that supports it, e.g. --devices nnapi,cpu",
                "add a fallback device that supports it, e.g. devices=[\"nnapi\", \"cpu\"]",
            ),
            (
                Message::about(Arg::Shape, "x=1,16,7,1", ": dim 2 is fixed at 6"),
                "--shape x=1,16,7,1: dim 2 is fixed at 6",
                "shape={\"x\": (1, 16, 7, 1)}: dim 2 is fixed at 6",
            ),
            (
                Message::about(Arg::Shape, "x=D,D,...", ""),
                "--shape x=D,D,...",
                "shape={\"x\": (D, D, ...)}",
            ),
            (
                Message::about(Arg::Dim, "batch=2", " clashes"),
                "--dim batch=2 clashes",
                "dim={\"batch\": 2} clashes",
            ),
            (
                Message::about_arg(Arg::Memory, " needs ").given(Arg::Stages, "N"),
                "--memory needs --stages N",
                "memory= needs stages=N",
            ),
            (
                Message::text("declare its pair with ").given(Arg::State, "cache.0=OUTPUT"),
                "declare its pair with --state cache.0=OUTPUT",
                "declare its pair with state={\"cache.0\": \"OUTPUT\"}",
            ),
            (
                Message::about_arg(Arg::LearnDims, " runs the model"),
                "--learn-dims runs the model",
                "--learn-dims runs the model",
            ),
            (
                Message::text("use ").given(Arg::Rules, "FILE.part"),
                "use --rules FILE.part",
                "use rules=\"FILE.part\"",
            ),
        ];
        for (m, cli, python) in cases {
            assert_eq!(m.to_string(), cli);
            assert_eq!(m.worded(Face::Cli), cli);
            assert_eq!(m.worded(Face::Python), python, "{cli}");
        }
    }

    #[test]
    fn plain_text_is_the_same_for_both_faces_even_with_dashes() {
        let m = Message::from("/data/my--model.bin: truncated; see cleave partition --help");
        assert_eq!(m.worded(Face::Python), m.worded(Face::Cli));
        assert_eq!(
            m.worded(Face::Python),
            "/data/my--model.bin: truncated; see cleave partition --help"
        );
    }
}
