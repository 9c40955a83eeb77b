import type { View } from '../ctx';
import { clear, h } from '../dom';

export const securityView: View = (root) => {
  clear(root, h('h1', null, 'Security'));
};
