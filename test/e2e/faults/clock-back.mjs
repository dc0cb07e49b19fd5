// Loaded with `node --import` into a tidemark process: once TIDEMARK_TEST_CLOCK_BACK_AFTER_MS have passed, the wall
// clock (Date.now and new Date()) steps back by TIDEMARK_TEST_CLOCK_BACK_MS, as an NTP step or a resumed VM does.
const back = Number(process.env.TIDEMARK_TEST_CLOCK_BACK_MS ?? 0);
const after = Number(process.env.TIDEMARK_TEST_CLOCK_BACK_AFTER_MS ?? 0);
const RealDate = Date;
const t0 = RealDate.now();
const offset = () => (RealDate.now() - t0 >= after ? -back : 0);
class SteppedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + offset());
    else super(...args);
  }
  static now() {
    return RealDate.now() + offset();
  }
}
globalThis.Date = SteppedDate;
