//! `Catalog`: the one Durable Object that knows which products exist. The
//! shell of `catalog`: it runs that module's SQL and answers the edge.
//! Only the Worker calls it: `POST /register` with a product id as the
//! body, `GET /list` (the newest, for the listing) and `GET /ids?after=N`
//! (every id, page by page, for the edge's view of which exist).

use worker::{durable_object, DurableObject, Env, Method, Request, Response, State};

use crate::http::problem::Problem;
use crate::http::views;
use crate::object::catalog::{self, Registered};
use crate::wasm::http;
use crate::wasm::object::sqlite::DoSql;

#[durable_object]
pub struct Catalog {
    state: State,
}

impl DurableObject for Catalog {
    fn new(state: State, _env: Env) -> Self {
        Catalog { state }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        views::count_event();
        let mut db = DoSql::new(&self.state);
        let path = req.path();
        match (req.method(), path.as_str()) {
            (Method::Post, "/register") => {
                let id = req.text().await?;
                let now = crate::wasm::now_ms();
                match catalog::register(&mut db, &id, now) {
                    Ok(Registered::Full) => {
                        http::problem(Problem::catalog_full(crate::limits::PRODUCTS_MAX))
                            .map(Into::into)
                    }
                    Ok(_) => Response::ok("registered"),
                    Err(e) => {
                        worker::console_error!("Catalog: register {id:?}: {e}");
                        http::problem(Problem::internal()).map(Into::into)
                    }
                }
            }
            (Method::Get, "/ids") => {
                // The cursor is the edge's own; a bad one reads from the start.
                let after = req
                    .url()
                    .ok()
                    .and_then(|u| {
                        u.query_pairs()
                            .find(|(k, _)| k == "after")
                            .and_then(|(_, v)| v.parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                match catalog::ids_after(&mut db, after) {
                    Ok(page) => Response::from_json(&page),
                    Err(e) => {
                        worker::console_error!("Catalog: ids: {e}");
                        http::problem(Problem::internal()).map(Into::into)
                    }
                }
            }
            (Method::Get, "/list") => match catalog::newest(&mut db) {
                Ok(ids) => Response::from_json(&ids),
                Err(e) => {
                    worker::console_error!("Catalog: list: {e}");
                    http::problem(Problem::internal()).map(Into::into)
                }
            },
            _ => {
                http::problem(Problem::not_found(format!("Catalog has no {path}"))).map(Into::into)
            }
        }
    }
}
