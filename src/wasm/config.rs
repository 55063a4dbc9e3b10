//! The gate's settings, read from the Worker's environment once per
//! isolate and shared by the edge and the objects in it. Environment values
//! do not change while an isolate lives, so neither does the answer.

use std::cell::OnceCell;
use std::rc::Rc;

use worker::Env;

use crate::settings::{Settings, SettingsError};

thread_local! {
    // An isolate is single-threaded; the cell is filled once.
    static SETTINGS: OnceCell<Result<Rc<Settings>, SettingsError>> = const { OnceCell::new() };
}

/// The settings, or why they are refused (logged once per isolate).
pub fn settings(env: &Env) -> Result<Rc<Settings>, SettingsError> {
    SETTINGS.with(|cell| {
        cell.get_or_init(|| {
            let got = Settings::from_env(|name| env.var(name).ok().map(|v| v.to_string()));
            if let Err(e) = &got {
                worker::console_error!("flashgate: refusing to serve: {e}");
            }
            got.map(Rc::new)
        })
        .clone()
    })
}
