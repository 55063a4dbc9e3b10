// The waiting room's odds in words (build.rs inlines this file where a page
// names its slot, after shared.js, whose LANG, t and num it uses). A poll of
// the room says how many units are available and held, how many buyers are
// ahead, and a verdict; this turns that into one line, in the page's
// language, so that a buyer far back learns early that it is unlikely and
// everyone learns at once when nothing is left.
const ODDS_TEXT = {
  en: {
    likely: "Likely: {a} left, {b} buyers ahead of you",
    unlikely: "Unlikely: {b} buyers ahead of you for {a} left",
    returns: "Waiting for returns: none left, {h} held by buyers who have not paid yet",
    sold_out: "Sold out: nothing left and nothing held",
  },
  zh: {
    likely: "有望购得：剩余 {a} 件，您前面有 {b} 人",
    unlikely: "希望不大：您前面有 {b} 人，仅剩 {a} 件",
    returns: "等待退回：已无剩余，{h} 件被保留但尚未付款",
    sold_out: "已售罄：没有剩余，也没有保留中的",
  },
}[LANG];

/** One line for a poll's odds (`verdict`, `available`, `held`, `ahead`, `waiting_for_returns`). */
function oddsText(s) {
  const vars = { a: num(s.available), h: num(s.held), b: num(s.ahead) };
  const key = s.verdict === "sold_out" ? "sold_out" : s.waiting_for_returns ? "returns" : s.verdict;
  const text = ODDS_TEXT[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : `{${k}}`));
}

/** Shows a poll's odds in the element `id` (hidden until there are some). */
function showOdds(id, s) {
  const el = $(id);
  if (!el || !s || !s.verdict) return;
  el.hidden = false;
  el.dataset.verdict = s.verdict;
  el.textContent = oddsText(s);
}
