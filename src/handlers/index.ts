import { loginUser, logoutUser, refreshTokens, registerUser } from './auth.js'
import { openDocs } from './docs.js'
import type { Handlers } from './handler.js'
import { checkLiveness, checkReadiness } from './health.js'
import { createItem, deleteItem, getItem, listItems, updateItem } from './items.js'

/** Every operation of the contract, by operationId. */
export const handlers: Handlers = {
  openDocs,
  checkLiveness,
  checkReadiness,
  registerUser,
  loginUser,
  refreshTokens,
  logoutUser,
  listItems,
  createItem,
  getItem,
  updateItem,
  deleteItem
}
