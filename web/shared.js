"use strict";
// Shared by every page (the gate inlines it): the texts in English and
// Chinese, and a few helpers. The gate picks the language from
// Accept-Language and writes it into <html lang>.
const LANG = document.documentElement.lang.startsWith("zh") ? "zh" : "en";
const TEXT = {
  en: {
    title: "flashgate",
    products: "On sale",
    none: "Nothing is on sale right now.",
    state_open: "open", state_scheduled: "opens soon", state_paused: "paused", state_closed: "closed", sold_out: "sold out",
    sale: "Sale", available: "Available", held: "Held", sold: "Sold", per_buyer: "Per buyer", up_to: "up to {n}",
    opens_in: "Opens in {t}", quantity: "Quantity", buy: "Buy", working: "Working…",
    reservations: "Your reservations", reservation: "Reservation", status: "Status", pay_within: "Pay within",
    pay: "Pay", cancel: "Cancel", you_are: "You are",
    held_s: "reserved", confirmed: "confirmed", cancelled: "cancelled", expired: "expired", voided: "voided",
    waiting_room: "Waiting room", position: "position {p}, about {s} s", your_turn: "your turn",
    in_room: "You are in the waiting room; this page goes on by itself when your turn comes.",
    pow_progress: "Your browser is proving it is not a script's (about {n} tries): {s} s…",
    pow_done: "Proof of work done in {s} s.", pow_failed: "The proof of work did not finish: try again.",
    code_pow_required: "The waiting room asks a proof of work: try again.",
    reserved: "Reserved {n}. Pay before the timer runs out.",
    paid: "Paid. The order is yours.",
    cancelled_msg: "Cancelled; the units went back on sale.",
    expired_msg: "Your hold expired; the units went back on sale.",
    rate_limited: "Too many requests: try again in {s} s.",
    unreachable: "{what} failed: the gate cannot be reached. Try again.",
    offline: "The gate cannot be reached; retrying…",
    no_session: "Sign in at the shop first: this gate gives out no sessions.",
    not_on_sale: "This product is not on sale.",
    nf_title: "No such product", nf_body: "This shop has no product “{id}”: the link may be mistyped, or the product removed.", nf_back: "See what is on sale",
    join_queue: "Join the queue", all_held: "All held", limit_reached: "Limit reached",
    notice_paused: "The shop has paused this sale. Buying comes back here when it resumes; holds already made can still be paid.",
    notice_closed: "The sale is over.",
    notice_scheduled: "The sale opens at {at}.",
    notice_queue_opens: "The queue opens at {q}; the sale at {at}.",
    notice_prequeue: "The queue is open: join now. At the opening ({at}) everyone in it is put in a random order, ahead of later arrivals.",
    notice_held_out: "Every unit is held by buyers who have not paid yet. Units not paid for within {t} come back on sale, and this page shows it.",
    notice_sold_out: "Sold out: every unit is sold.",
    notice_limit: "You already have as many units as one buyer may have ({max}).",
    drawn_at_open: "in the queue; places are drawn at the opening",
    minutes: "{n} min", seconds: "{n} s",
    live: "live", polling: "updates every second",
    refused: "Refused ({status})",
    code_sold_out: "Sold out: every unit is taken.",
    code_insufficient_stock: "Not that many left: try fewer.",
    code_buyer_limit: "You have reached this product's limit per buyer.",
    code_not_open: "The sale has not opened yet.",
    code_closed: "The sale is closed.", code_paused: "The sale is paused for now.",
    code_not_admitted: "Not your turn yet in the waiting room.",
    code_expired: "This hold expired before payment.",
    code_overloaded: "The gate is busy: try again in a moment.",
    code_unavailable: "The gate is busy: try again in a moment.",
    // Admin
    admin: "Admin console", admin_token: "Admin token", check_token: "Use this token", product: "Product id", load: "Open",
    create: "Save settings", products_all: "Products", name: "Name", orders: "Orders at the origin", o_time: "Paid at", o_buyer: "Buyer", o_first: "First page", o_next: "Next page",
    group_sale: "Stock and sale window", group_buyer: "Per buyer", group_queue: "Waiting room", group_advanced: "Limits", group_face: "What buyers see",
    mode_active: "Running", mode_paused: "Paused", mode_closed: "Closed for good", u_min: "minutes", u_s: "seconds",
    pow_off: "Off", pow_fixed: "Fixed", pow_adaptive: "Adaptive", yes: "Yes", no: "No",
    token_ok: "Token accepted.", token_refused: "The gate refused this admin token (401): check it and enter it again.",
    saved: "Saved.", created: "Created.", opened: "Opened “{id}”: its current settings are below.", unchanged: "Nothing to save: no field changed.",
    no_product: "No product “{id}” yet. Its numbers are cleared; fill in at least the stock and save to create it.",
    bad_number: "{label}: “{v}” is not accepted. Enter a number from {min} to {max}{unit}.", config: "Configuration", actions: "Actions", pause: "Pause", resume: "Resume",
    close: "Close for good", restock: "Restock", units: "Units", void: "Void order", reservation_id: "Reservation id",
    live_view: "Live view", outcomes: "Outcomes per second", queue: "Waiting room", outbox: "Outbox",
    backlog: "Backlog", last_error: "Last error", last_success: "Last success", drift: "Drift against the origin",
    unknown: "unknown", none_yet: "none", done: "Done.",
  },
  zh: {
    title: "flashgate 秒杀",
    products: "正在抢购",
    none: "目前没有在售商品。",
    state_open: "抢购中", state_scheduled: "即将开抢", state_paused: "已暂停", state_closed: "已结束", sold_out: "已售罄",
    sale: "状态", available: "可抢", held: "已锁定", sold: "已售", per_buyer: "每人限购", up_to: "最多 {n} 件",
    opens_in: "距开抢 {t}", quantity: "数量", buy: "立即抢购", working: "处理中…",
    reservations: "我的预订", reservation: "预订号", status: "状态", pay_within: "剩余支付时间",
    pay: "支付", cancel: "取消", you_are: "当前买家",
    held_s: "已锁定", confirmed: "已确认", cancelled: "已取消", expired: "已过期", voided: "已作废",
    waiting_room: "排队等候", position: "第 {p} 位，约 {s} 秒", your_turn: "轮到您了",
    in_room: "您正在排队，轮到您时页面会自动继续。",
    pow_progress: "浏览器正在完成工作量证明（约 {n} 次尝试）：{s} 秒…",
    pow_done: "工作量证明完成，用时 {s} 秒。", pow_failed: "工作量证明未完成，请重试。",
    code_pow_required: "排队需要先完成工作量证明，请重试。",
    reserved: "已锁定 {n} 件，请在倒计时结束前支付。",
    paid: "支付成功，订单已确认。",
    cancelled_msg: "已取消，商品已放回。",
    expired_msg: "锁定已过期，商品已放回。",
    rate_limited: "请求过于频繁，请 {s} 秒后再试。",
    unreachable: "{what}失败：无法连接，请重试。",
    offline: "无法连接，正在重试…",
    no_session: "请先在商城登录。",
    not_on_sale: "该商品未在售。",
    nf_title: "商品不存在", nf_body: "本店没有商品“{id}”：链接可能有误，或商品已下架。", nf_back: "查看在售商品",
    join_queue: "加入排队", all_held: "已全部锁定", limit_reached: "已达限购",
    notice_paused: "商家已暂停本次抢购。恢复后可在此页继续购买；已锁定的订单仍可支付。",
    notice_closed: "抢购已结束。",
    notice_scheduled: "将于 {at} 开抢。",
    notice_queue_opens: "排队于 {q} 开始，抢购于 {at} 开始。",
    notice_prequeue: "排队已开始，现在即可加入。开抢时（{at}）已在队列中的买家将随机排序，排在之后到达的买家之前。",
    notice_held_out: "所有商品均已被尚未支付的买家锁定。{t} 内未支付的商品会重新开放购买，本页会实时显示。",
    notice_sold_out: "已售罄：所有商品均已售出。",
    notice_limit: "您已达到每人限购数量（{max} 件）。",
    drawn_at_open: "已在队列中，开抢时随机排序",
    minutes: "{n} 分钟", seconds: "{n} 秒",
    live: "实时", polling: "每秒刷新",
    refused: "请求被拒绝（{status}）",
    code_sold_out: "已售罄。",
    code_insufficient_stock: "库存不足，请减少数量。",
    code_buyer_limit: "已达到每人限购数量。",
    code_not_open: "尚未开抢。",
    code_closed: "抢购已结束。", code_paused: "抢购暂停中。",
    code_not_admitted: "排队尚未轮到您。",
    code_expired: "锁定已过期，未能支付。",
    code_overloaded: "系统繁忙，请稍后再试。",
    code_unavailable: "系统繁忙，请稍后再试。",
    admin: "管理后台", admin_token: "管理令牌", check_token: "使用此令牌", product: "商品 ID", load: "打开",
    create: "保存设置", products_all: "商品列表", name: "名称", orders: "源站订单", o_time: "支付时间", o_buyer: "买家", o_first: "第一页", o_next: "下一页",
    group_sale: "库存与销售时间", group_buyer: "每位买家", group_queue: "排队", group_advanced: "上限", group_face: "买家看到的信息",
    mode_active: "进行中", mode_paused: "已暂停", mode_closed: "永久结束", u_min: "分钟", u_s: "秒",
    pow_off: "关闭", pow_fixed: "固定", pow_adaptive: "自适应", yes: "是", no: "否",
    token_ok: "令牌有效。", token_refused: "网关拒绝了此管理令牌（401），请检查后重新输入。",
    saved: "已保存。", created: "已创建。", opened: "已打开“{id}”，下方为当前设置。", unchanged: "没有需要保存的修改。",
    no_product: "商品“{id}”尚不存在。数据已清空；至少填写库存后保存即可创建。",
    bad_number: "{label}：“{v}”无效，请输入 {min} 到 {max}{unit} 之间的数字。", config: "配置", actions: "操作", pause: "暂停", resume: "恢复",
    close: "永久结束", restock: "补货", units: "数量", void: "作废订单", reservation_id: "预订号",
    live_view: "实时视图", outcomes: "每秒结果", queue: "排队", outbox: "发件箱",
    backlog: "积压", last_error: "最近错误", last_success: "最近成功", drift: "与源站的差额",
    unknown: "未知", none_yet: "无", done: "完成。",
  },
}[LANG];

/** A text by key, with {name} filled in from `vars`. */
function t(key, vars = {}) {
  const s = TEXT[key] ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : `{${k}}`));
}
const $ = (id) => document.getElementById(id);
const num = (n) => Number(n).toLocaleString();
const when = (ms) => new Date(ms).toLocaleString();
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
/** A duration in the browser's locale: "1:05:03" or "4:09". */
function span(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const two = (x) => String(x).padStart(2, "0");
  return h ? `${h}:${two(m)}:${two(r)}` : `${m}:${two(r)}`;
}
/** Fills every element with data-t="key" with its text. */
function translate(root = document) {
  for (const el of root.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  document.title = t("title");
}
/** A sale state in words: "sold out" only when nothing is held either. */
function stateText(p) {
  if (p.state === "open" && p.available === 0) return t(p.held > 0 ? "all_held" : "sold_out");
  return t(`state_${p.state}`);
}
/** A duration in the unit people use: whole minutes in minutes (and any
 * from ten minutes on), the rest in seconds. */
function minutes(ms) {
  const s = Math.round(ms / 1000);
  return s >= 60 && (s % 60 === 0 || s >= 600) ? t("minutes", { n: num(Math.round(s / 60)) }) : t("seconds", { n: num(s) });
}
/** A product's face, read as text in this page's language (the other one
 * when it has none). Pages put it in with textContent, never as HTML. */
const face = (p) => (p && p.face) || {};
const local = (v) => (v ? v[LANG] ?? v[LANG === "zh" ? "en" : "zh"] ?? "" : "");
const faceName = (p) => local(face(p).name) || p.product_id;
function priceText(p) {
  const pr = face(p).price;
  if (!pr) return "";
  try {
    return new Intl.NumberFormat(LANG === "zh" ? "zh-CN" : "en", { style: "currency", currency: pr.currency }).format(Number(pr.amount));
  } catch {
    return `${pr.amount} ${pr.currency}`;
  }
}
/** The face's image, or nothing: the gate took only an https URL. */
function faceImage(p, className) {
  const url = face(p).image_url;
  if (!url || !url.startsWith("https://")) return null;
  const img = document.createElement("img");
  img.className = className;
  img.alt = faceName(p);
  img.referrerPolicy = "no-referrer";
  // An image that does not load takes no room (a handler set from the
  // script, which the policy allows; an attribute would not run).
  img.onerror = () => img.remove();
  img.src = url;
  return img;
}
