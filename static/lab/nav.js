// The site menu on narrow screens: #nav-toggle shows or hides #site-nav (the page links,
// the user and "Log out"), which then drops down under the top bar. Esc, a click outside
// it or a followed link closes it. On wide screens the button is hidden and this is idle.

const toggle = document.getElementById('nav-toggle');
const menu = document.getElementById('site-nav');
const topbar = toggle?.closest('.topbar');

function setOpen(open) {
  topbar.classList.toggle('nav-open', open);
  toggle.setAttribute('aria-expanded', String(open));
}

const isOpen = () => topbar.classList.contains('nav-open');

if (toggle && menu && topbar) {
  toggle.addEventListener('click', () => {
    setOpen(!isOpen());
    if (isOpen()) menu.querySelector('a, button')?.focus();
  });
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape' || !isOpen()) return;
    setOpen(false);
    toggle.focus();
    event.stopPropagation(); // this Esc closed the menu, nothing else
  }, true);
  document.addEventListener('click', (event) => {
    if (isOpen() && !topbar.contains(event.target)) setOpen(false);
  });
  menu.addEventListener('click', (event) => {
    if (event.target.closest('a')) setOpen(false);
  });
}
