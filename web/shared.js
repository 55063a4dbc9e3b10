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
    reserved: "Reserved {n}. Pay before the timer runs out.",
    paid: "Paid. The order is yours.",
    cancelled_msg: "Cancelled; the units went back on sale.",
    expired_msg: "Your hold expired; the units went back on sale.",
    rate_limited: "Too many requests: try again in {s} s.",
    unreachable: "{what} failed: the gate cannot be reached. Try again.",
    offline: "The gate cannot be reached; retrying…",
    no_session: "Sign in at the shop first: this gate gives out no sessions.",
    not_on_sale: "This product is not on sale.",
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
    admin: "Admin console", admin_token: "Admin token", save: "Save", product: "Product id", load: "Open",
    create: "Create or update", config: "Configuration", actions: "Actions", pause: "Pause", resume: "Resume",
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
    reserved: "已锁定 {n} 件，请在倒计时结束前支付。",
    paid: "支付成功，订单已确认。",
    cancelled_msg: "已取消，商品已放回。",
    expired_msg: "锁定已过期，商品已放回。",
    rate_limited: "请求过于频繁，请 {s} 秒后再试。",
    unreachable: "{what}失败：无法连接，请重试。",
    offline: "无法连接，正在重试…",
    no_session: "请先在商城登录。",
    not_on_sale: "该商品未在售。",
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
    admin: "管理后台", admin_token: "管理令牌", save: "保存", product: "商品 ID", load: "打开",
    create: "创建或更新", config: "配置", actions: "操作", pause: "暂停", resume: "恢复",
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
/** A sale state in words. */
function stateText(p) {
  if (p.state === "open" && p.available === 0) return t("sold_out");
  return t(`state_${p.state}`);
}
