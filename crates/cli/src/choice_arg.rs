//! Flags whose values are the facade's words ([`cleave::Choice`]): clap lists them in `--help`
//! and refuses any other, and the words are declared once, in the facade, for both faces.

use std::marker::PhantomData;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

/// The value parser of a flag that takes one of `T`'s words.
pub struct Words<T>(PhantomData<fn() -> T>);

impl<T> Clone for Words<T> {
    fn clone(&self) -> Self {
        Words(PhantomData)
    }
}

/// The parser for `T`'s words (`value_parser = words::<cleave::Objective>()`).
pub fn words<T: cleave::Choice>() -> Words<T> {
    Words(PhantomData)
}

impl<T: cleave::Choice> Words<T> {
    fn values() -> impl Iterator<Item = PossibleValue> {
        T::WORDS.iter().map(|&(w, _, help)| match help {
            Some(h) => PossibleValue::new(w).help(h),
            None => PossibleValue::new(w).hide(true),
        })
    }
}

impl<T: cleave::Choice> TypedValueParser for Words<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let word = PossibleValuesParser::new(Self::values()).parse_ref(cmd, arg, value)?;
        T::WORDS
            .iter()
            .find(|(w, ..)| *w == word)
            .map(|&(_, v, _)| v)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Self::values()))
    }
}
