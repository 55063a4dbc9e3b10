//! The edge's request pipeline, as steps: what an API request meets, in
//! which order, and what each answer leads to. `Pipeline::next` takes the
//! outcome of the last step and returns the next one: count the request
//! against a limit, read the body, verify a token's signature, check the
//! catalog lists the product, fetch its snapshot, forward a command to a
//! target object, answer, or refuse. `crate::wasm::edge` performs each step
//! and feeds its outcome back; it decides nothing.
//!
//! The order is the design (docs/admission.md): every API request meets
//! the client's limit first, so a flood is turned away before anything
//! else is read or verified; then its credential; then the buyer's own
//! limit (after the token proved who it is) or the admin's; then whether
//! the product exists, so that no made-up id reaches an object; and only
//! then its snapshot and its object.
//!
//! A token signed by an identity provider leaves its signature to the
//! runtime's WebCrypto (`Step::VerifyToken`), the one step whose work is
//! not the shell's own I/O: everything else about the token (its form,
//! key, algorithm and claims) is decided before it, here.

use flashgate_wire::jwks::Jwk;
use flashgate_wire::signing::Presented;
use flashgate_wire::token::Unverified;
use serde_json::json;

use crate::edge::auth::{self, Proof};
use crate::edge::cache::{EdgeCache, Known};
use crate::edge::rate_limit::{self, Limiter};
use crate::edge::room::{self, Decided, RoomRoute};
use crate::edge::routes::{self, ApiRoute, Incoming, OrdersQuery, Route};
use crate::edge::shards::{self, Target};
use crate::edge::ticket::TicketClaims;
use crate::http::codes::ProblemCode;
use crate::http::problem::Problem;
use crate::http::reply::Reply;
use crate::http::time::rfc3339;
use crate::protocol::snapshot::Snapshot;
use crate::protocol::Command;
use crate::settings::Settings;
use std::rc::Rc;

/// The parts of a request's head the pipeline reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Head<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub connecting_ip: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub authorization: Option<&'a str>,
    /// The `Cookie` header, whole.
    pub cookie: Option<&'a str>,
    /// A waiting-room ticket (`Flashgate-Ticket`).
    pub ticket: Option<&'a str>,
    /// A join's proof-of-work payload (`Flashgate-Pow`).
    pub pow: Option<&'a str>,
    pub key_id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub upgrade: Option<&'a str>,
}

impl<'a> Head<'a> {
    fn secure(&self) -> bool {
        self.url.starts_with("https:")
    }

    /// The buyer token of the session cookie (`auth::buyer_cookie`).
    fn cookie_token(&self) -> Option<&'a str> {
        auth::buyer_cookie(self.cookie, self.secure())
    }
}

/// What the shell does next.
#[derive(Debug)]
pub enum Step<'a> {
    /// Count the request against `limiter` under `key`: `Input::Limit`.
    /// With `then_body`, a request within the limit is asked for its body
    /// next (`ReadBody`), so the shell may read it in the same wait as the
    /// count, and never for a request over it.
    Limit {
        limiter: Limiter,
        key: String,
        then_body: bool,
    },
    /// Read the body, at most `BODY_BYTES_MAX` bytes: `Input::Body`.
    ReadBody,
    /// Verify a provider's signature with the runtime's WebCrypto:
    /// `Input::Verified`.
    VerifyToken(Verify<'a>),
    /// Whether the catalog lists the product: `Input::Listed`.
    Listed { product_id: String },
    /// List the product in the catalog (an update may create it):
    /// `Input::Registered`.
    Register { product_id: String },
    /// The product's snapshot, as the isolate's cache has it or fetches
    /// it: `Input::Snapshot`.
    Snapshot { product_id: String },
    /// 32 bytes from the runtime's CSPRNG: `Input::Random`.
    Random,
    /// Send the command to its object: `Input::Forwarded`.
    Forward(Target),
    /// Send on the last answer the shell got (the object's, or the
    /// catalog's refusal), untouched.
    PassOn,
    /// Answer with this product's view (the snapshot's, as the object
    /// renders it), cacheable for a second.
    Product(Rc<Vec<u8>>),
    /// Answer this.
    Answer(Reply),
    /// Refuse with this problem.
    Refuse(Problem),
    /// Refuse with 503 `unavailable`, its `Retry-After` jittered by the
    /// shell so that a crowd refused together does not come back together.
    Unavailable,
    /// Answer a dev session (`session`, with a random buyer).
    Session { secure: bool },
    /// The list of products (`all`: whatever their state).
    List { all: bool },
    /// The gate's stats of the product beside the origin's totals.
    Drift {
        product_id: String,
        command: Command,
    },
    /// A page of the product's orders at the origin.
    Orders {
        product_id: String,
        query: OrdersQuery,
    },
    /// The product's history: home's, then its stock shards', merged
    /// (`edge::admin::history_body`).
    History { product_id: String },
}

/// A signature for the runtime to verify.
#[derive(Debug)]
pub struct Verify<'a> {
    pub key: &'a Jwk,
    /// The token's first two parts and the dot between them, as signed.
    pub signing_input: &'a str,
    pub signature: Vec<u8>,
}

/// The outcome of a step.
pub enum Input {
    /// The first call.
    Start,
    Limit(LimitAnswer),
    /// The body, or the problem reading it was.
    Body(Result<Vec<u8>, Problem>),
    /// Whether the signature holds.
    Verified(bool),
    /// `Err`: an unknown product, or a catalog that could not be read.
    Listed(Result<(), Problem>),
    Registered(Registration),
    /// `None`: the object could not be asked.
    Snapshot(Option<Known>),
    Random([u8; 32]),
    /// The status of the object's answer; `None`: it could not be reached.
    Forwarded(Option<u16>),
}

/// A rate limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitAnswer {
    Within,
    Over,
    /// The binding is not configured.
    Missing,
}

/// The catalog's answer to a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    Listed,
    /// The catalog refused it; its answer is passed on.
    Refused,
    Unreachable,
}

/// A validated API request on its way to its object.
struct Api {
    product_id: String,
    cmd: Command,
    orders: Option<OrdersQuery>,
    drift: bool,
}

/// Where a buyer's proof leads once a provider's signature is verified.
enum Then {
    Api(ApiRoute),
    Room(RoomRoute, String),
    Live(String),
}

/// A request to the room, once its buyer is proven.
struct Room {
    route: RoomRoute,
    product_id: String,
    buyer: String,
    /// A record's ticket, verified before the snapshot.
    claims: Option<TicketClaims>,
}

/// What the pipeline waits for.
enum Stage<'a> {
    Start(Route),
    /// The client's limit; then the route.
    IpLimit(Route),
    /// The admin's limit, then the list.
    AdminList,
    Body(ApiRoute),
    Token(Unverified<'a>, Then),
    /// The buyer's or the admin's limit.
    SecondLimit(Api),
    Listed(Api),
    Registered(Api),
    /// `refreshed`: an id's shard was missing from a snapshot fetched anew.
    Snapshot(Api, bool),
    Forwarded {
        product_id: String,
        reserve: bool,
    },
    RoomLimit(Room),
    RoomListed(Room),
    RoomSnapshot(Room),
    RoomRandom(Room, room::Challenging),
    LiveListed(String, Option<String>),
    LiveSnapshot(String, Option<String>),
    Done,
}

/// One request's way through the edge.
pub struct Pipeline<'a> {
    settings: &'a Settings,
    head: Head<'a>,
    stage: Stage<'a>,
    /// The client's rate-limit key (`rate_limit::ip_key`).
    ip: String,
    /// The limiter of the `Limit` step taken last.
    limiter: Limiter,
    /// The time once the client's limit passed, which the request's
    /// credentials and tickets are checked at.
    now_ms: u64,
    body: Vec<u8>,
}

impl<'a> Pipeline<'a> {
    /// The pipeline of a request to `route` (an API route: the pages, the
    /// OpenAPI document and the assets are answered before the settings
    /// are read).
    pub fn new(settings: &'a Settings, head: Head<'a>, route: Route) -> Self {
        Pipeline {
            settings,
            ip: rate_limit::ip_key(head.connecting_ip),
            head,
            stage: Stage::Start(route),
            limiter: Limiter::Ip,
            now_ms: 0,
            body: Vec::new(),
        }
    }

    /// The step after `input`, the outcome of the last one, at `now_ms`.
    /// `cache` is the isolate's, which the edge's own answers read and
    /// count in.
    pub fn next(&mut self, input: Input, now_ms: u64, cache: &mut EdgeCache) -> Step<'a> {
        if let Input::Limit(answer) = &input {
            match answer {
                LimitAnswer::Within => {}
                LimitAnswer::Over => {
                    if let Stage::SecondLimit(Api {
                        cmd: Command::Reserve { product_id, .. },
                        ..
                    }) = &self.stage
                    {
                        cache.edge_refused(product_id, ProblemCode::RateLimited);
                    }
                    let policy = self.settings.rate_limits.of(self.limiter);
                    return self.end(Step::Refuse(rate_limit::limited(self.limiter, policy)));
                }
                LimitAnswer::Missing => return self.end(Step::Refuse(Problem::misconfigured())),
            }
        }
        match (std::mem::replace(&mut self.stage, Stage::Done), input) {
            (Stage::Start(route), Input::Start) => {
                // An API route's body is read next, once the limit passed.
                let then_body = matches!(route, Route::Api(_));
                self.stage = Stage::IpLimit(route);
                self.limit_then(Limiter::Ip, self.ip.clone(), then_body)
            }
            (Stage::IpLimit(route), Input::Limit(_)) => {
                self.now_ms = now_ms;
                self.route(route)
            }
            (Stage::AdminList, Input::Limit(_)) => Step::List { all: true },
            (Stage::Body(route), Input::Body(body)) => match body {
                Ok(body) => {
                    self.body = body;
                    self.api(route)
                }
                Err(p) => Step::Refuse(p),
            },
            (Stage::Token(unverified, then), Input::Verified(verified)) => {
                match auth::concluded(unverified, verified) {
                    Ok(buyer) => self.proven(then, buyer),
                    Err(p) => Step::Refuse(p),
                }
            }
            (Stage::SecondLimit(api), Input::Limit(_)) => self.listed(api),
            (Stage::Listed(api), Input::Listed(listed)) => match listed {
                Ok(()) => self.after_listed(api),
                Err(p) => Step::Refuse(p),
            },
            (Stage::Registered(api), Input::Registered(r)) => match r {
                Registration::Listed => self.forward(api, 1, None),
                Registration::Refused => Step::PassOn,
                Registration::Unreachable => Step::Unavailable,
            },
            (Stage::Snapshot(api, refreshed), Input::Snapshot(known)) => {
                self.snapshot(api, refreshed, known, now_ms, cache)
            }
            (
                Stage::Forwarded {
                    product_id,
                    reserve,
                },
                Input::Forwarded(status),
            ) => match status {
                Some(status) => {
                    if invalidates(reserve, status) {
                        cache.invalidate(&product_id);
                    }
                    Step::PassOn
                }
                None => Step::Unavailable,
            },
            (Stage::RoomLimit(r), Input::Limit(_)) => {
                let product_id = r.product_id.clone();
                self.stage = Stage::RoomListed(r);
                Step::Listed { product_id }
            }
            (Stage::RoomListed(r), Input::Listed(listed)) => match listed {
                Ok(()) => self.room_listed(r),
                Err(p) => Step::Refuse(p),
            },
            (Stage::RoomSnapshot(r), Input::Snapshot(known)) => {
                self.room_snapshot(r, known, now_ms, cache)
            }
            (Stage::RoomRandom(r, c), Input::Random(random)) => {
                let decided = room::challenge(self.settings, &r.product_id, &r.buyer, c, &random);
                self.room_decided(r, decided)
            }
            (Stage::LiveListed(product_id, buyer), Input::Listed(listed)) => match listed {
                Ok(()) => {
                    let step = Step::Snapshot {
                        product_id: product_id.clone(),
                    };
                    self.stage = Stage::LiveSnapshot(product_id, buyer);
                    step
                }
                Err(p) => Step::Refuse(p),
            },
            (Stage::LiveSnapshot(product_id, buyer), Input::Snapshot(known)) => {
                if let Some(Known::Unknown) = known {
                    return Step::Refuse(Problem::unknown_product(&product_id));
                }
                let command = Command::Watch {
                    product_id: product_id.clone(),
                    buyer,
                    client: rate_limit::client_tag(&self.ip),
                };
                self.stage = Stage::Forwarded {
                    product_id: product_id.clone(),
                    reserve: false,
                };
                Step::Forward(Target {
                    object: product_id,
                    command,
                })
            }
            // An input the stage does not wait for is the shell's bug.
            (_, _) => Step::Refuse(Problem::internal()),
        }
    }

    fn end(&mut self, step: Step<'a>) -> Step<'a> {
        self.stage = Stage::Done;
        step
    }

    fn limit(&mut self, limiter: Limiter, key: String) -> Step<'a> {
        self.limit_then(limiter, key, false)
    }

    fn limit_then(&mut self, limiter: Limiter, key: String, then_body: bool) -> Step<'a> {
        self.limiter = limiter;
        Step::Limit {
            limiter,
            key,
            then_body,
        }
    }

    /// The route, once the client's limit passed.
    fn route(&mut self, route: Route) -> Step<'a> {
        match route {
            Route::Api(route) => {
                self.stage = Stage::Body(route);
                Step::ReadBody
            }
            Route::Session => Step::Session {
                secure: self.head.secure(),
            },
            Route::Queue { product_id, join } => {
                let route = if join {
                    RoomRoute::Join
                } else {
                    RoomRoute::Standing
                };
                self.prove(Then::Room(route, product_id))
            }
            Route::QueueRecord { product_id } => {
                self.prove(Then::Room(RoomRoute::Record, product_id))
            }
            Route::QueueChallenge { product_id } => {
                self.prove(Then::Room(RoomRoute::Challenge, product_id))
            }
            Route::ListProducts => Step::List { all: false },
            Route::AdminListProducts => match auth::admin(self.settings, self.head.authorization) {
                Ok(()) => {
                    self.stage = Stage::AdminList;
                    self.limit(Limiter::Admin, self.ip.clone())
                }
                Err(p) => Step::Refuse(p),
            },
            Route::Live { product_id } => {
                let upgrade = self.head.upgrade.unwrap_or_default();
                if !upgrade.eq_ignore_ascii_case("websocket") {
                    return Step::Refuse(Problem::upgrade_required());
                }
                // Anyone may watch (the pushes are the product's public
                // numbers); a buyer token, when sent, must be valid, and
                // labels the socket.
                let (settings, head) = (self.settings, self.head);
                let proof = auth::prove_viewer(
                    settings,
                    head.authorization,
                    head.cookie_token(),
                    self.now_ms,
                );
                match proof {
                    Ok(None) => self.live_listed(product_id, None),
                    Ok(Some(proof)) => self.proof(proof, Then::Live(product_id)),
                    Err(p) => Step::Refuse(p),
                }
            }
            Route::Page(_) | Route::OpenApi | Route::Asset(_) => Step::Refuse(Problem::internal()),
        }
    }

    /// Proves the request's buyer token, then goes on to `then`; a
    /// provider's token goes by the runtime's verify first.
    fn prove(&mut self, then: Then) -> Step<'a> {
        let (settings, head) = (self.settings, self.head);
        match auth::prove_buyer(
            settings,
            head.authorization,
            head.cookie_token(),
            self.now_ms,
        ) {
            Ok(proof) => self.proof(proof, then),
            Err(p) => Step::Refuse(p),
        }
    }

    fn proof(&mut self, proof: Proof<'a>, then: Then) -> Step<'a> {
        match proof {
            Proof::Proven(buyer) => self.proven(then, buyer),
            Proof::Verify(unverified) => {
                let step = Step::VerifyToken(Verify {
                    key: unverified.key,
                    signing_input: unverified.signing_input,
                    signature: unverified.signature.clone(),
                });
                self.stage = Stage::Token(unverified, then);
                step
            }
        }
    }

    fn proven(&mut self, then: Then, buyer: String) -> Step<'a> {
        match then {
            Then::Api(route) => self.parse(route, Some(buyer)),
            Then::Live(product_id) => self.live_listed(product_id, Some(buyer)),
            Then::Room(route, product_id) => {
                let key = buyer.clone();
                self.stage = Stage::RoomLimit(Room {
                    route,
                    product_id,
                    buyer,
                    claims: None,
                });
                self.limit(Limiter::Buyer, key)
            }
        }
    }

    fn incoming(&self) -> Incoming<'_> {
        let head = &self.head;
        Incoming {
            method: head.method,
            path_and_query: routes::path_and_query(head.url),
            content_type: head.content_type,
            idempotency_key: head.idempotency_key,
            authorization: head.authorization,
            cookie: head.cookie_token(),
            ticket: head.ticket,
            signature: Presented {
                kid: head.key_id,
                timestamp: head.timestamp,
                signature: head.signature,
            },
            body: &self.body,
        }
    }

    /// An API request with its body: the admin's token, then the buyer's.
    fn api(&mut self, route: ApiRoute) -> Step<'a> {
        if let Err(p) = routes::precheck(&self.incoming(), &route, self.settings) {
            return Step::Refuse(p);
        }
        if route.needs_buyer() {
            return self.prove(Then::Api(route));
        }
        self.parse(route, None)
    }

    /// The request as a command, then the buyer's or the admin's limit.
    fn parse(&mut self, route: ApiRoute, buyer: Option<String>) -> Step<'a> {
        let product_id = route.product_id().to_string();
        let admin = route.is_admin();
        let drift = matches!(route, ApiRoute::AdminDrift(_));
        let orders = matches!(route, ApiRoute::AdminOrders(_));
        let inc = self.incoming();
        let cmd = match routes::parse_proven(&inc, route, self.settings, buyer, self.now_ms) {
            Ok(c) => c,
            Err(p) => return Step::Refuse(p),
        };
        // After the admin token was checked: a stranger's bad query is a 401.
        let orders = match orders.then(|| routes::orders_query(inc.path_and_query)) {
            Some(Err(p)) => return Step::Refuse(p),
            Some(Ok(q)) => Some(q),
            None => None,
        };
        let second = second_limit(&cmd, admin, &self.ip);
        let api = Api {
            product_id,
            cmd,
            orders,
            drift,
        };
        match second {
            Some((limiter, key)) => {
                self.stage = Stage::SecondLimit(api);
                self.limit(limiter, key)
            }
            None => self.listed(api),
        }
    }

    /// Only a configure may name a product that does not exist yet (it
    /// creates it); for the rest an unknown id ends at the catalog.
    fn listed(&mut self, api: Api) -> Step<'a> {
        if matches!(api.cmd, Command::Configure { .. }) {
            return self.after_listed(api);
        }
        let product_id = api.product_id.clone();
        self.stage = Stage::Listed(api);
        Step::Listed { product_id }
    }

    fn after_listed(&mut self, api: Api) -> Step<'a> {
        if let Some(query) = api.orders {
            return Step::Orders {
                product_id: api.product_id,
                query,
            };
        }
        match &api.cmd {
            Command::GetProduct { .. }
            | Command::Reserve { .. }
            | Command::GetReservation { .. }
            | Command::Confirm { .. }
            | Command::Cancel { .. }
            | Command::Void { .. } => {
                let product_id = api.product_id.clone();
                self.stage = Stage::Snapshot(api, false);
                Step::Snapshot { product_id }
            }
            // An update may create the product: it is listed first, so that
            // a product never exists unlisted (an id whose update then fails
            // lists nothing, see `catalog`).
            Command::Configure { .. } => {
                let product_id = api.product_id.clone();
                self.stage = Stage::Registered(api);
                Step::Register { product_id }
            }
            Command::Stats { .. } if api.drift => Step::Drift {
                product_id: api.product_id,
                command: api.cmd,
            },
            Command::History { .. } => Step::History {
                product_id: api.product_id,
            },
            _ => self.forward(api, 1, None),
        }
    }

    /// The command's next step once its product's snapshot is in (or could
    /// not be had).
    fn snapshot(
        &mut self,
        api: Api,
        refreshed: bool,
        known: Option<Known>,
        now_ms: u64,
        cache: &mut EdgeCache,
    ) -> Step<'a> {
        let snapshot = match known {
            Some(Known::Product { snapshot, body }) => {
                if let Command::GetProduct { .. } = api.cmd {
                    return Step::Product(body);
                }
                snapshot
            }
            Some(Known::Unknown) => {
                return match api.cmd {
                    Command::GetProduct { .. } | Command::Reserve { .. } => {
                        Step::Refuse(Problem::unknown_product(&api.product_id))
                    }
                    // The catalog lists it, so the object decides: a
                    // snapshot that said unknown may be from before a
                    // restart's load.
                    _ => self.forward(api, 1, None),
                };
            }
            None => {
                return match api.cmd {
                    // The object answers a read itself.
                    Command::GetProduct { .. } => self.forward(api, 1, None),
                    // Without a snapshot the edge does not know the
                    // product's shards, and a reserve sent to the wrong one
                    // would let a buyer hold on two shards past the
                    // per-buyer limit.
                    _ => Step::Unavailable,
                };
            }
        };
        let shards = snapshot.shards;
        let index = shards::shard_of(&api.cmd, shards, &self.settings.shard_key);
        if let Command::Reserve { buyer, ticket, .. } = &api.cmd {
            if let Some(p) = snapshot.reserve_answer(buyer, index, ticket.as_ref(), now_ms) {
                cache.edge_refused(&api.product_id, p.code);
                return Step::Refuse(p);
            }
            cache.routed(&api.product_id, index);
            return self.forward(api, shards, Some(index));
        }
        match id_shard(
            &snapshot,
            index,
            cache.routed_to(&api.product_id),
            refreshed,
            now_ms,
        ) {
            IdShard::Exists => self.forward(api, shards, None),
            IdShard::Unknown => Step::Refuse(Problem::unknown_reservation()),
            IdShard::Refresh => {
                cache.invalidate(&api.product_id);
                let product_id = api.product_id.clone();
                self.stage = Stage::Snapshot(api, true);
                Step::Snapshot { product_id }
            }
        }
    }

    /// The command to its object: the shard `index` when the snapshot chose
    /// it, else the one `shards::target` routes it to.
    fn forward(&mut self, api: Api, shards: u16, index: Option<u16>) -> Step<'a> {
        let reserve = matches!(api.cmd, Command::Reserve { .. });
        let target = match index {
            Some(index) => shards::target_at(api.cmd, shards, index),
            None => shards::target(api.cmd, shards, &self.settings.shard_key),
        };
        self.stage = Stage::Forwarded {
            product_id: api.product_id,
            reserve,
        };
        Step::Forward(target)
    }

    fn room_listed(&mut self, mut r: Room) -> Step<'a> {
        if r.route == RoomRoute::Record {
            // A record is checked as a poll is: the ticket before the
            // snapshot.
            let claims = room::ticket(
                self.settings,
                &r.product_id,
                &r.buyer,
                self.head.ticket,
                self.now_ms,
            );
            match claims {
                Ok(c) => r.claims = Some(c),
                Err(p) => return Step::Refuse(p),
            }
        }
        let product_id = r.product_id.clone();
        self.stage = Stage::RoomSnapshot(r);
        Step::Snapshot { product_id }
    }

    fn room_snapshot(
        &mut self,
        r: Room,
        known: Option<Known>,
        now_ms: u64,
        cache: &mut EdgeCache,
    ) -> Step<'a> {
        let snapshot: Rc<Snapshot> = match known {
            Some(Known::Product { snapshot, .. }) => snapshot,
            Some(Known::Unknown) => return Step::Refuse(Problem::unknown_product(&r.product_id)),
            None => return Step::Unavailable,
        };
        let (s, pid, buyer) = (self.settings, r.product_id.as_str(), r.buyer.as_str());
        let decided = match (r.route, &r.claims) {
            (RoomRoute::Join, _) => {
                room::join(s, pid, buyer, self.head.pow, &snapshot, cache, now_ms)
            }
            (RoomRoute::Standing, _) => {
                room::standing(s, pid, buyer, self.head.ticket, &snapshot, cache, now_ms)
            }
            (RoomRoute::Challenge, _) => room::ask_challenge(&snapshot, now_ms),
            (RoomRoute::Record, Some(claims)) => room::record(pid, &snapshot, claims, now_ms),
            (RoomRoute::Record, None) => Decided::Refuse(Problem::internal()),
        };
        self.room_decided(r, decided)
    }

    fn room_decided(&mut self, r: Room, decided: Decided) -> Step<'a> {
        match decided {
            Decided::Answer(reply) => Step::Answer(reply),
            Decided::Refuse(p) => Step::Refuse(p),
            Decided::Unavailable => Step::Unavailable,
            Decided::Challenge(c) => {
                self.stage = Stage::RoomRandom(r, c);
                Step::Random
            }
        }
    }

    fn live_listed(&mut self, product_id: String, buyer: Option<String>) -> Step<'a> {
        let step = Step::Listed {
            product_id: product_id.clone(),
        };
        self.stage = Stage::LiveListed(product_id, buyer);
        step
    }
}

/// The limit a request meets after the client's: the buyer's own (after
/// the token proved who it is) for a buyer's command, the admin's for an
/// admin route, by the client's key; none for the rest.
pub fn second_limit(cmd: &Command, admin: bool, ip: &str) -> Option<(Limiter, String)> {
    match cmd {
        Command::Reserve { buyer, .. }
        | Command::GetReservation { buyer, .. }
        | Command::Cancel { buyer, .. } => Some((Limiter::Buyer, buyer.clone())),
        _ if admin => Some((Limiter::Admin, ip.to_string())),
        _ => None,
    }
}

/// Whether the object's answer to a command makes the product's snapshot
/// stale: a reserve refused with 409 was let through by the snapshot (sold
/// out, most likely), so the next request fetches a new one.
pub fn invalidates(reserve: bool, status: u16) -> bool {
    reserve && status == 409
}

/// Whether a reservation id's stock shard exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdShard {
    Exists,
    /// `unknown_reservation`: made-up ids make no object.
    Unknown,
    /// Fetch the snapshot anew (the shard may have been made since), then
    /// ask again.
    Refresh,
}

/// Whether the shard `index` of an id exists, by the snapshot and the
/// shards this isolate routed a reserve to (`routed`, a bit each: such a
/// shard counts as made). A snapshot older than `SHARD_MISS_REFRESH_MS`
/// is fetched anew first, once (`refreshed`).
pub fn id_shard(
    snapshot: &Snapshot,
    index: u16,
    routed: u64,
    refreshed: bool,
    now_ms: u64,
) -> IdShard {
    if shards::exists(snapshot.existing | routed, index) {
        return IdShard::Exists;
    }
    let age = now_ms.saturating_sub(snapshot.fetched_at_ms);
    if refreshed || age < crate::limits::SHARD_MISS_REFRESH_MS {
        IdShard::Unknown
    } else {
        IdShard::Refresh
    }
}

/// `POST /api/session`: an anonymous buyer (named by `random`) and its
/// token, in the body and in an HttpOnly cookie, when dev sessions are on.
pub fn session(
    settings: &Settings,
    secure: bool,
    now_ms: u64,
    random: u64,
) -> Result<Reply, Problem> {
    let s = auth::session(settings, now_ms, random)?;
    let body = json!({
        "buyer_id": s.buyer_id,
        "token": s.token,
        "expires_at": rfc3339(s.expires_at_ms),
        "expires_at_ms": s.expires_at_ms,
    });
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        auth::buyer_cookie_name(secure),
        s.token,
        crate::limits::SESSION_TTL_S,
        if secure { "; Secure" } else { "" }
    );
    let mut reply = Reply::ok(201, body);
    reply.headers.push(("set-cookie", cookie));
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::cache::Entry;
    use crate::edge::room::tests::snapshot;
    use crate::http::codes::ProblemCode;
    use crate::ids::IdCodec;
    use crate::protocol::buyer_filter::BuyerFilter;
    use crate::protocol::snapshot::{PowNow, SoldOut};
    use crate::settings::tests::{settings, ADMIN_TOKEN};
    use serde_json::Value;

    /// The time of every run: a second after the snapshots' `OPEN`.
    const NOW: u64 = crate::edge::room::tests::OPEN + 1_000;

    fn token(s: &Settings, buyer: &str) -> String {
        let claims = flashgate_wire::token::Claims {
            sub: buyer.into(),
            aud: s.buyer_tokens.audience().into(),
            iat: NOW / 1000,
            exp: NOW / 1000 + 600,
            nbf: None,
        };
        flashgate_wire::token::mint(s.buyer_tokens.hs256(), &claims, NOW)
    }

    /// How the shell's world answers each step.
    struct World {
        /// The limiter that refuses, and whether the bindings exist.
        over: Option<Limiter>,
        bindings: bool,
        listed: bool,
        registration: Registration,
        snapshot: Option<Known>,
        /// The object's status; `None`: unreachable.
        status: Option<u16>,
        verified: bool,
    }

    impl Default for World {
        fn default() -> Self {
            World {
                over: None,
                bindings: true,
                listed: true,
                registration: Registration::Listed,
                snapshot: Some(product(snapshot(10, false, None))),
                status: Some(201),
                verified: true,
            }
        }
    }

    fn product(s: Snapshot) -> Known {
        Known::Product {
            body: Rc::new(b"{\"id\":\"p1\"}".to_vec()),
            snapshot: Rc::new(s),
        }
    }

    /// A step of a run that is not its last.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Limit(Limiter, String),
        ReadBody,
        Verify(String),
        Listed(String),
        Register(String),
        Snapshot(String),
        Random,
        /// The object, and the command's kind.
        Forward(String, &'static str),
    }

    /// How a run ends.
    #[derive(Debug, PartialEq)]
    enum End {
        PassOn,
        Product,
        Answer(u16),
        Refuse(ProblemCode),
        Unavailable,
        Session,
        List(bool),
        Drift,
        Orders(Option<u64>),
        History,
    }

    fn kind(cmd: &Command) -> &'static str {
        match cmd {
            Command::Reserve { .. } => "reserve",
            Command::Cancel { .. } => "cancel",
            Command::Stats { .. } => "stats",
            Command::Configure { .. } => "configure",
            Command::GetProduct { .. } => "get_product",
            Command::Watch { .. } => "watch",
            Command::Shard { .. } => "shard",
            _ => "other",
        }
    }

    /// A request's head and body.
    struct Req {
        method: &'static str,
        url: String,
        authorization: Option<String>,
        ticket: Option<String>,
        pow: Option<String>,
        upgrade: Option<&'static str>,
        body: Vec<u8>,
    }

    fn req(method: &'static str, path: &str, authorization: Option<String>) -> Req {
        Req {
            method,
            url: format!("http://gate.test{path}"),
            authorization,
            ticket: None,
            pow: None,
            upgrade: None,
            body: Vec::new(),
        }
    }

    fn buyer(s: &Settings, method: &'static str, path: &str) -> Req {
        req(method, path, Some(format!("Bearer {}", token(s, "alice"))))
    }

    fn admin(method: &'static str, path: &str) -> Req {
        req(method, path, Some(format!("Bearer {ADMIN_TOKEN}")))
    }

    fn reserve(s: &Settings) -> Req {
        Req {
            body: br#"{"quantity":1}"#.to_vec(),
            ..buyer(s, "POST", "/api/products/p1/reservations")
        }
    }

    /// The one check every case goes through: runs `r` against `world`
    /// as the shell would, and gives the steps before the last, and how
    /// it ended (with the last answer, if any).
    fn run(
        s: &Settings,
        world: &World,
        r: &Req,
        cache: &mut EdgeCache,
    ) -> (Vec<Seen>, End, Option<Reply>) {
        let path_and_query = routes::path_and_query(&r.url);
        let route = routes::route(r.method, routes::path(path_and_query)).unwrap();
        let head = Head {
            method: r.method,
            url: &r.url,
            connecting_ip: Some("203.0.113.9"),
            content_type: Some("application/json"),
            idempotency_key: Some("\"k-1\""),
            authorization: r.authorization.as_deref(),
            ticket: r.ticket.as_deref(),
            pow: r.pow.as_deref(),
            upgrade: r.upgrade,
            ..Head::default()
        };
        let mut p = Pipeline::new(s, head, route);
        let mut seen = Vec::new();
        let mut input = Input::Start;
        // A limit's `then_body` promised the body is asked for next.
        let mut body_next = false;
        for _ in 0..20 {
            let step = p.next(input, NOW, cache);
            assert_eq!(
                matches!(step, Step::ReadBody),
                std::mem::take(&mut body_next),
                "{step:?} after {seen:?}"
            );
            input = match step {
                Step::Limit {
                    limiter,
                    key,
                    then_body,
                } => {
                    seen.push(Seen::Limit(limiter, key));
                    let answer = match (world.bindings, world.over) {
                        (false, _) => LimitAnswer::Missing,
                        (true, Some(l)) if l == limiter => LimitAnswer::Over,
                        _ => LimitAnswer::Within,
                    };
                    body_next = then_body && answer == LimitAnswer::Within;
                    Input::Limit(answer)
                }
                Step::ReadBody => {
                    seen.push(Seen::ReadBody);
                    Input::Body(Ok(r.body.clone()))
                }
                Step::VerifyToken(v) => {
                    seen.push(Seen::Verify(v.key.kid.clone()));
                    Input::Verified(world.verified)
                }
                Step::Listed { product_id } => {
                    seen.push(Seen::Listed(product_id.clone()));
                    Input::Listed(match world.listed {
                        true => Ok(()),
                        false => Err(Problem::unknown_product(&product_id)),
                    })
                }
                Step::Register { product_id } => {
                    seen.push(Seen::Register(product_id));
                    Input::Registered(world.registration)
                }
                Step::Snapshot { product_id } => {
                    seen.push(Seen::Snapshot(product_id));
                    Input::Snapshot(world.snapshot.clone())
                }
                Step::Random => {
                    seen.push(Seen::Random);
                    Input::Random([9; 32])
                }
                Step::Forward(t) => {
                    seen.push(Seen::Forward(t.object, kind(&t.command)));
                    Input::Forwarded(world.status)
                }
                Step::PassOn => return (seen, End::PassOn, None),
                Step::Product(_) => return (seen, End::Product, None),
                Step::Answer(reply) => return (seen, End::Answer(reply.status), Some(reply)),
                Step::Refuse(p) => return (seen, End::Refuse(p.code), None),
                Step::Unavailable => return (seen, End::Unavailable, None),
                Step::Session { .. } => return (seen, End::Session, None),
                Step::List { all } => return (seen, End::List(all), None),
                Step::Drift { .. } => return (seen, End::Drift, None),
                Step::Orders { query, .. } => return (seen, End::Orders(query.after), None),
                Step::History { .. } => return (seen, End::History, None),
            };
        }
        panic!("no end after 20 steps: {seen:?}");
    }

    fn ip() -> Seen {
        Seen::Limit(Limiter::Ip, rate_limit::ip_key(Some("203.0.113.9")))
    }

    fn admin_limit() -> Seen {
        Seen::Limit(Limiter::Admin, rate_limit::ip_key(Some("203.0.113.9")))
    }

    fn alice() -> Seen {
        Seen::Limit(Limiter::Buyer, "alice".into())
    }

    fn p1(step: fn(String) -> Seen) -> Seen {
        step("p1".into())
    }

    #[test]
    fn a_reserve_meets_the_limits_the_catalog_and_the_snapshot_then_its_shard() {
        let s = settings();
        let mut cache = EdgeCache::default();
        let (seen, end, _) = run(&s, &World::default(), &reserve(&s), &mut cache);
        assert_eq!(
            seen,
            [
                ip(),
                Seen::ReadBody,
                alice(),
                p1(Seen::Listed),
                p1(Seen::Snapshot),
                Seen::Forward("p1".into(), "reserve"),
            ]
        );
        assert_eq!(end, End::PassOn);
        // Over 4 shards, to the buyer's own, which then counts as made.
        let mut four = snapshot(10, false, None);
        four.shards = 4;
        let world = World {
            snapshot: Some(product(four)),
            ..World::default()
        };
        let index = s.shard_key.shard_of("p1", "alice", 4);
        let (seen, end, _) = run(&s, &world, &reserve(&s), &mut cache);
        let object = match index {
            0 => "p1".to_string(),
            i => format!("p1#{i}"),
        };
        let kind = if index == 0 { "reserve" } else { "shard" };
        assert_eq!(seen.last(), Some(&Seen::Forward(object, kind)));
        assert_eq!(end, End::PassOn);
        assert_eq!(cache.routed_to("p1"), (1 << index) & !1);
    }

    #[test]
    fn a_reserve_is_refused_at_the_edge_when_the_snapshot_can_answer_it() {
        let s = settings();
        // Sold out, and alice holds nothing.
        let mut sold_out = snapshot(0, false, None);
        sold_out.fetched_at_ms = NOW;
        sold_out.sold_out = Some(SoldOut {
            age_ms: 0,
            buyers: vec![BuyerFilter::build(["bob"].into_iter())],
        });
        let world = World {
            snapshot: Some(product(sold_out)),
            ..World::default()
        };
        let (seen, end, _) = run(&s, &world, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(end, End::Refuse(ProblemCode::SoldOut));
        assert_eq!(seen.last(), Some(&p1(Seen::Snapshot)), "no object is asked");
        // Without a snapshot the shards are not known: 503, never a guess.
        let world = World {
            snapshot: None,
            ..World::default()
        };
        let (_, end, _) = run(&s, &world, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(end, End::Unavailable);
        let world = World {
            snapshot: Some(Known::Unknown),
            ..World::default()
        };
        let (_, end, _) = run(&s, &world, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(end, End::Refuse(ProblemCode::UnknownProduct));
    }

    #[test]
    fn a_reserve_refused_by_the_object_with_409_drops_the_snapshot() {
        let s = settings();
        for (status, dropped) in [(409, true), (201, false), (422, false)] {
            let mut cache = EdgeCache::default();
            cache.insert(
                "p1",
                Entry {
                    fetched_at_ms: NOW,
                    known: product(snapshot(10, false, None)),
                },
            );
            let world = World {
                status: Some(status),
                ..World::default()
            };
            let (_, end, _) = run(&s, &world, &reserve(&s), &mut cache);
            assert_eq!(end, End::PassOn);
            assert_eq!(cache.fresh("p1", NOW).is_none(), dropped, "{status}");
        }
        let unreachable = World {
            status: None,
            ..World::default()
        };
        let (_, end, _) = run(&s, &unreachable, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(end, End::Unavailable);
    }

    #[test]
    fn the_second_limit_is_the_buyers_or_the_admins() {
        let cmd = |route: ApiRoute, buyer: Option<&str>, body: &[u8]| {
            let s = settings();
            let inc = Incoming {
                method: "POST",
                path_and_query: "/",
                content_type: Some("application/json"),
                idempotency_key: Some("\"k\""),
                authorization: None,
                cookie: None,
                ticket: None,
                signature: Presented {
                    kid: None,
                    timestamp: None,
                    signature: None,
                },
                body,
            };
            routes::parse_proven(&inc, route, &s, buyer.map(String::from), NOW).unwrap()
        };
        let rid = IdCodec::new(&settings().id_secret, "p1").encode(7);
        let alice = Some("alice");
        let cases = [
            (
                cmd(ApiRoute::Reserve("p1".into()), alice, br#"{"quantity":1}"#),
                false,
                Some(Limiter::Buyer),
            ),
            (
                cmd(ApiRoute::Cancel("p1".into(), rid.clone()), alice, b""),
                false,
                Some(Limiter::Buyer),
            ),
            (
                cmd(ApiRoute::GetReservation("p1".into(), rid), alice, b""),
                false,
                Some(Limiter::Buyer),
            ),
            (
                cmd(ApiRoute::AdminRestock("p1".into()), None, br#"{"units":1}"#),
                true,
                Some(Limiter::Admin),
            ),
            (
                cmd(ApiRoute::GetProduct("p1".into()), None, b""),
                false,
                None,
            ),
        ];
        for (cmd, admin, want) in cases {
            let got = second_limit(&cmd, admin, "ip:x");
            assert_eq!(got.as_ref().map(|(l, _)| *l), want, "{cmd:?}");
            let key = match want {
                Some(Limiter::Buyer) => Some("alice"),
                Some(_) => Some("ip:x"),
                None => None,
            };
            assert_eq!(got.as_ref().map(|(_, k)| k.as_str()), key);
        }
    }

    #[test]
    fn a_refusal_ends_the_pipeline_where_it_is_met() {
        let s = settings();
        let over = |l| World {
            over: Some(l),
            ..World::default()
        };
        // The client's limit, before the body is read.
        let (seen, end, _) = run(
            &s,
            &over(Limiter::Ip),
            &reserve(&s),
            &mut EdgeCache::default(),
        );
        assert_eq!(
            (seen, end),
            (vec![ip()], End::Refuse(ProblemCode::RateLimited))
        );
        let (_, end, _) = run(
            &s,
            &over(Limiter::Buyer),
            &reserve(&s),
            &mut EdgeCache::default(),
        );
        assert_eq!(end, End::Refuse(ProblemCode::RateLimited));
        let missing = World {
            bindings: false,
            ..World::default()
        };
        let (_, end, _) = run(&s, &missing, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(end, End::Refuse(ProblemCode::Misconfigured));
        // No token: refused before the buyer's limit.
        let anonymous = Req {
            authorization: None,
            ..reserve(&s)
        };
        let (seen, end, _) = run(&s, &World::default(), &anonymous, &mut EdgeCache::default());
        assert_eq!(seen, [ip(), Seen::ReadBody]);
        assert_eq!(end, End::Refuse(ProblemCode::TokenMissing));
        // An unknown product, after the limits.
        let unlisted = World {
            listed: false,
            ..World::default()
        };
        let (seen, end, _) = run(&s, &unlisted, &reserve(&s), &mut EdgeCache::default());
        assert_eq!(seen.last(), Some(&p1(Seen::Listed)));
        assert_eq!(end, End::Refuse(ProblemCode::UnknownProduct));
    }

    #[test]
    fn an_ids_shard_must_exist_and_a_stale_snapshot_is_asked_again() {
        let mut s = snapshot(10, false, None);
        s.shards = 4;
        s.existing = 0b0011;
        s.fetched_at_ms = NOW;
        let old = NOW + crate::limits::SHARD_MISS_REFRESH_MS;
        assert_eq!(id_shard(&s, 1, 0, false, NOW), IdShard::Exists);
        assert_eq!(
            id_shard(&s, 2, 0b0100, false, NOW),
            IdShard::Exists,
            "routed here"
        );
        assert_eq!(id_shard(&s, 2, 0, false, NOW), IdShard::Unknown, "fresh");
        assert_eq!(id_shard(&s, 2, 0, false, old), IdShard::Refresh);
        assert_eq!(id_shard(&s, 2, 0, true, old), IdShard::Unknown, "refreshed");
    }

    #[test]
    fn a_buyers_id_command_goes_to_its_shard_or_is_unknown() {
        let s = settings();
        let cancel = |n: u64| {
            let rid = IdCodec::new(&s.id_secret, "p1").encode(n);
            buyer(
                &s,
                "POST",
                &format!("/api/products/p1/reservations/{rid}/cancel"),
            )
        };
        let (seen, end, _) = run(&s, &World::default(), &cancel(7), &mut EdgeCache::default());
        assert_eq!(
            seen,
            [
                ip(),
                Seen::ReadBody,
                alice(),
                p1(Seen::Listed),
                p1(Seen::Snapshot),
                Seen::Forward("p1".into(), "cancel"),
            ]
        );
        assert_eq!(end, End::PassOn);
        // On a product of 4 shards of which only home exists, an id of
        // another shard is unknown, after one snapshot fetched anew (the
        // first was older than SHARD_MISS_REFRESH_MS).
        let elsewhere = (1..1000)
            .find(|&n| {
                let cmd = Command::Cancel {
                    product_id: "p1".into(),
                    buyer: "alice".into(),
                    reservation_id: n,
                };
                shards::shard_of(&cmd, 4, &s.shard_key) != 0
            })
            .unwrap();
        let mut four = snapshot(10, false, None);
        four.shards = 4;
        four.existing = 1;
        let world = World {
            snapshot: Some(product(four)),
            ..World::default()
        };
        let (seen, end, _) = run(&s, &world, &cancel(elsewhere), &mut EdgeCache::default());
        let snapshots = seen.iter().filter(|s| **s == p1(Seen::Snapshot)).count();
        assert_eq!(
            (snapshots, end),
            (2, End::Refuse(ProblemCode::UnknownReservation))
        );
        // A shard this isolate sent a reserve to counts as made.
        let mut cache = EdgeCache::default();
        let index = shards::shard_of(
            &Command::Cancel {
                product_id: "p1".into(),
                buyer: "alice".into(),
                reservation_id: elsewhere,
            },
            4,
            &s.shard_key,
        );
        cache.routed("p1", index);
        let (seen, end, _) = run(&s, &world, &cancel(elsewhere), &mut cache);
        assert_eq!(
            seen.last(),
            Some(&Seen::Forward(format!("p1#{index}"), "shard"))
        );
        assert_eq!(end, End::PassOn);
    }

    #[test]
    fn admin_routes_meet_the_admins_limit_and_end_where_they_are_served() {
        let s = settings();
        let cases = [
            (
                "GET",
                "/admin/products/p1/stats",
                vec![p1(Seen::Listed), Seen::Forward("p1".into(), "stats")],
                End::PassOn,
            ),
            (
                "GET",
                "/admin/products/p1/drift",
                vec![p1(Seen::Listed)],
                End::Drift,
            ),
            (
                "GET",
                "/admin/products/p1/orders?after=5",
                vec![p1(Seen::Listed)],
                End::Orders(Some(5)),
            ),
            (
                "GET",
                "/admin/products/p1/history",
                vec![p1(Seen::Listed)],
                End::History,
            ),
            // A configure lists the product first, and names none that must
            // exist.
            (
                "PUT",
                "/admin/products/p1",
                vec![p1(Seen::Register), Seen::Forward("p1".into(), "configure")],
                End::PassOn,
            ),
        ];
        for (method, path, tail, want) in cases {
            let r = Req {
                body: b"{}".to_vec(),
                ..admin(method, path)
            };
            let (seen, end, _) = run(&s, &World::default(), &r, &mut EdgeCache::default());
            let mut expected = vec![ip(), Seen::ReadBody, admin_limit()];
            expected.extend(tail);
            assert_eq!((seen, end), (expected, want), "{method} {path}");
        }
        // The catalog's refusal of a new product is passed on.
        let refused = World {
            registration: Registration::Refused,
            ..World::default()
        };
        let r = Req {
            body: b"{}".to_vec(),
            ..admin("PUT", "/admin/products/p1")
        };
        let (seen, end, _) = run(&s, &refused, &r, &mut EdgeCache::default());
        assert_eq!((seen.last(), end), (Some(&p1(Seen::Register)), End::PassOn));
        // A stranger is refused before any limit of the admin's.
        let stranger = req("GET", "/admin/products/p1/stats", None);
        let (seen, end, _) = run(&s, &World::default(), &stranger, &mut EdgeCache::default());
        assert_eq!(
            (seen, end),
            (
                vec![ip(), Seen::ReadBody],
                End::Refuse(ProblemCode::Unauthorized)
            )
        );
        // The console's list.
        let (seen, end, _) = run(
            &s,
            &World::default(),
            &admin("GET", "/admin/products"),
            &mut EdgeCache::default(),
        );
        assert_eq!((seen, end), (vec![ip(), admin_limit()], End::List(true)));
    }

    #[test]
    fn reads_are_answered_from_the_snapshot_and_without_one_by_the_object() {
        let s = settings();
        let read = req("GET", "/api/products/p1", None);
        let (seen, end, _) = run(&s, &World::default(), &read, &mut EdgeCache::default());
        assert_eq!(
            seen,
            [ip(), Seen::ReadBody, p1(Seen::Listed), p1(Seen::Snapshot)]
        );
        assert_eq!(end, End::Product);
        let none = World {
            snapshot: None,
            ..World::default()
        };
        let (seen, end, _) = run(&s, &none, &read, &mut EdgeCache::default());
        assert_eq!(
            seen.last(),
            Some(&Seen::Forward("p1".into(), "get_product"))
        );
        assert_eq!(end, End::PassOn);
        let (seen, end, _) = run(
            &s,
            &World::default(),
            &req("GET", "/api/products", None),
            &mut EdgeCache::default(),
        );
        assert_eq!((seen, end), (vec![ip()], End::List(false)));
        let (_, end, _) = run(
            &s,
            &World::default(),
            &req("POST", "/api/session", None),
            &mut EdgeCache::default(),
        );
        assert_eq!(end, End::Session);
    }

    #[test]
    fn the_room_proves_limits_and_lists_before_it_answers() {
        let s = settings();
        let room = World {
            snapshot: Some(product(snapshot(10, true, None))),
            ..World::default()
        };
        let mut cache = EdgeCache::default();
        let (seen, end, reply) = run(
            &s,
            &room,
            &buyer(&s, "POST", "/api/products/p1/queue"),
            &mut cache,
        );
        assert_eq!(seen, [ip(), alice(), p1(Seen::Listed), p1(Seen::Snapshot)]);
        assert_eq!(end, End::Answer(201));
        let ticket = reply.unwrap().body["ticket"].as_str().unwrap().to_string();
        // The poll and the record read the ticket back.
        for path in ["/api/products/p1/queue", "/api/products/p1/queue/record"] {
            let poll = Req {
                ticket: Some(ticket.clone()),
                ..buyer(&s, "GET", path)
            };
            let (_, end, _) = run(&s, &room, &poll, &mut cache);
            assert_eq!(end, End::Answer(200), "{path}");
            // A record without its ticket is refused before the snapshot.
            let (seen, end, _) = run(&s, &room, &buyer(&s, "GET", path), &mut cache);
            assert_eq!(end, End::Refuse(ProblemCode::TicketRequired));
            let record = path.ends_with("record");
            assert_eq!(seen.contains(&p1(Seen::Snapshot)), !record, "{path}");
        }
        // With a proof of work, a join without a solution gets a challenge
        // signed from fresh random bytes, as does a buyer who asks one.
        let pow = World {
            snapshot: Some(product(snapshot(
                10,
                true,
                Some(PowNow {
                    level: 2,
                    infinite_queue: false,
                }),
            ))),
            ..World::default()
        };
        let (seen, end, _) = run(
            &s,
            &pow,
            &buyer(&s, "POST", "/api/products/p1/queue"),
            &mut cache,
        );
        assert_eq!(
            (seen.last(), end),
            (Some(&Seen::Random), End::Refuse(ProblemCode::PowRequired))
        );
        let (seen, end, reply) = run(
            &s,
            &pow,
            &buyer(&s, "GET", "/api/products/p1/queue/challenge"),
            &mut cache,
        );
        assert_eq!((seen.last(), end), (Some(&Seen::Random), End::Answer(200)));
        assert!(reply
            .unwrap()
            .body
            .get("expected_tries")
            .is_some_and(Value::is_number));
        // The room's buyer has its limit.
        let over = World {
            over: Some(Limiter::Buyer),
            ..World::default()
        };
        let (seen, end, _) = run(
            &s,
            &over,
            &buyer(&s, "POST", "/api/products/p1/queue"),
            &mut cache,
        );
        assert_eq!(
            (seen, end),
            (vec![ip(), alice()], End::Refuse(ProblemCode::RateLimited))
        );
    }

    #[test]
    fn a_watcher_needs_an_upgrade_and_no_token_but_a_valid_one() {
        let s = settings();
        let watch = |authorization| Req {
            upgrade: Some("websocket"),
            ..req("GET", "/api/products/p1/live", authorization)
        };
        let (seen, end, _) = run(
            &s,
            &World::default(),
            &watch(None),
            &mut EdgeCache::default(),
        );
        assert_eq!(
            seen,
            [
                ip(),
                p1(Seen::Listed),
                p1(Seen::Snapshot),
                Seen::Forward("p1".into(), "watch")
            ]
        );
        assert_eq!(end, End::PassOn);
        let (_, end, _) = run(
            &s,
            &World::default(),
            &watch(Some("Bearer nope".into())),
            &mut EdgeCache::default(),
        );
        assert_eq!(end, End::Refuse(ProblemCode::TokenInvalid));
        let plain = req("GET", "/api/products/p1/live", None);
        let (_, end, _) = run(&s, &World::default(), &plain, &mut EdgeCache::default());
        assert_eq!(end, End::Refuse(ProblemCode::UpgradeRequired));
        let unknown = World {
            snapshot: Some(Known::Unknown),
            ..World::default()
        };
        let (_, end, _) = run(&s, &unknown, &watch(None), &mut EdgeCache::default());
        assert_eq!(end, End::Refuse(ProblemCode::UnknownProduct));
    }

    /// Settings that trust an identity provider's ES256 key `ec-1`.
    fn with_provider() -> Settings {
        use flashgate_wire::jwks::Jwks;
        use flashgate_wire::token::{Provider, Verifier};
        let b64 =
            |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b);
        let jwks = json!({"keys": [{"kty": "EC", "kid": "ec-1", "crv": "P-256",
            "x": b64(&[1; 32]), "y": b64(&[2; 32])}]});
        let jwks = Jwks::parse(&jwks.to_string()).unwrap();
        let ids = flashgate_wire::mac::hmac_sha256(b"the buyer ids key of these tests");
        let provider = Provider::new(jwks, "https://login.example.com/", "sub", ids).unwrap();
        let mut s = settings();
        let hs256 = s.buyer_tokens.hs256().clone();
        s.buyer_tokens = Verifier::new(hs256, s.buyer_tokens.audience(), Some(provider)).unwrap();
        s
    }

    #[test]
    fn a_providers_token_waits_for_the_runtimes_verify() {
        let s = with_provider();
        let b64 =
            |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b);
        let header = json!({"alg": "ES256", "kid": "ec-1"}).to_string();
        let claims = json!({"sub": "alice", "aud": s.buyer_tokens.audience(),
            "iss": "https://login.example.com/", "iat": NOW / 1000, "exp": NOW / 1000 + 600})
        .to_string();
        let jwt = format!(
            "{}.{}.{}",
            b64(header.as_bytes()),
            b64(claims.as_bytes()),
            b64(&[0; 64])
        );
        let r = Req {
            authorization: Some(format!("Bearer {jwt}")),
            ..reserve(&s)
        };
        let verified = World::default();
        let (seen, end, _) = run(&s, &verified, &r, &mut EdgeCache::default());
        assert_eq!(
            &seen[..4],
            [ip(), Seen::ReadBody, Seen::Verify("ec-1".into()), alice()]
        );
        assert_eq!(end, End::PassOn);
        let refused = World {
            verified: false,
            ..World::default()
        };
        let (seen, end, _) = run(&s, &refused, &r, &mut EdgeCache::default());
        assert_eq!(seen.last(), Some(&Seen::Verify("ec-1".into())));
        assert_eq!(end, End::Refuse(ProblemCode::TokenInvalid));
        // The room and the live socket take the same step.
        let join = Req {
            authorization: r.authorization.clone(),
            ..req("POST", "/api/products/p1/queue", None)
        };
        let (seen, _, _) = run(&s, &refused, &join, &mut EdgeCache::default());
        assert_eq!(seen, [ip(), Seen::Verify("ec-1".into())]);
    }

    #[test]
    fn only_a_reserves_conflict_drops_the_snapshot() {
        assert!(invalidates(true, 409));
        assert!(!invalidates(true, 201));
        assert!(!invalidates(false, 409));
    }

    #[test]
    fn a_session_sets_its_cookie_for_the_scheme() {
        let s = settings();
        let plain = session(&s, false, NOW, 7).unwrap();
        let secure = session(&s, true, NOW, 7).unwrap();
        let cookie = |r: &Reply| {
            r.headers
                .iter()
                .find(|(n, _)| *n == "set-cookie")
                .unwrap()
                .1
                .clone()
        };
        assert!(cookie(&plain).starts_with("fg_buyer="));
        assert!(
            cookie(&secure).starts_with("__Host-fg_buyer=")
                && cookie(&secure).ends_with("; Secure")
        );
        assert_eq!(plain.status, 201);
        assert_eq!(plain.body["buyer_id"], "anon-0000000000000007");
        let off = Settings::from_env(crate::settings::tests::env(&[])).unwrap();
        assert!(session(&off, false, NOW, 7).is_err());
    }
}
