//! Bilingual text: every user-facing message exists in Chinese (the course's language) and English.
use serde::{Deserialize, Serialize};

/// Output language, chosen with `--lang`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    #[default]
    Zh,
    En,
}

/// A message in both languages.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Text {
    pub zh: String,
    pub en: String,
}

impl Text {
    pub fn new(zh: impl Into<String>, en: impl Into<String>) -> Self {
        Text {
            zh: zh.into(),
            en: en.into(),
        }
    }

    /// The same text in both languages (numbers, names, messages from Python).
    pub fn same(s: impl Into<String>) -> Self {
        let s = s.into();
        Text {
            zh: s.clone(),
            en: s,
        }
    }

    pub fn get(&self, lang: Lang) -> &str {
        match lang {
            Lang::Zh => &self.zh,
            Lang::En => &self.en,
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text::same(s)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text::same(s)
    }
}

/// `Text::new(format!(..), format!(..))` in one line.
#[macro_export]
macro_rules! text {
    ($zh:expr, $en:expr $(,)?) => {
        $crate::i18n::Text::new($zh, $en)
    };
}
